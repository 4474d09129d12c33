"""What a placement writes and prints: the Placement and its CSV (placement.py),
all-or-nothing output folders (outputs.py), the summary (summary.py), the emulated
step as trace.json (trace_events.py) and the placed graph for TensorBoard
(tensorboard_graph.py). report.json is assembled by pardnn.pipeline.report."""

from pardnn.io.outputs import OutputDir, check_output_dir
from pardnn.io.placement import Placement, read_csv
from pardnn.io.summary import print_summary

__all__ = ["OutputDir", "Placement", "check_output_dir", "print_summary", "read_csv"]

"""What a placement writes and prints: the Placement and its CSV (placement.py),
all-or-nothing output folders (outputs.py), the summary (summary.py), the emulated
step as trace.json (trace_events.py) and the placed graph for TensorBoard
(tensorboard_graph.py). report.json is assembled by pardnn.pipeline.report."""

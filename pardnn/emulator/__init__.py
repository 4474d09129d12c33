"""The emulator every placement is judged by (thesis §4.1.2, Step 2): TF's executor
(scheduler.py), memory per device over the step (memory.py), and the bounds on the step
of every placement (bounds.py). See docs/emulator.md for the model and its limits;
report.json's fields are assembled from its Schedule and MemoryProfile by
pardnn.pipeline.report.
"""

from pardnn.emulator.bounds import step_lower_bound_us
from pardnn.emulator.memory import MemoryProfile, track_memory
from pardnn.emulator.scheduler import Schedule, simulate
from pardnn.graph.levels import critical_path_us
from pardnn.graph.op_rates import fastest_times

__all__ = ["MemoryProfile", "Schedule", "lower_bound_us", "simulate", "track_memory"]


def lower_bound_us(graph, cluster) -> float:
    """A bound on the step of every placement: the larger of the critical path and
    pardnn.emulator.bounds.step_lower_bound_us (work / K; a path's forced transfers)."""
    return max(critical_path_us(graph, fastest_times(graph, cluster)), step_lower_bound_us(graph, cluster))

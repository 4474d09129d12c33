"""The emulator every placement is judged by (thesis §4.1.2, Step 2): TF's executor
(scheduler.py), memory per device over the step (memory.py), the emulator's parts of the
bound on the step of every placement (bounds.py; pardnn.pipeline.bounds.step_lower_bound
joins them with the exact model's) and the bounds of one placement that prune trials
(trial.py). See docs/emulator.md for the model and its limits;
report.json's fields are assembled from its Schedule and MemoryProfile by
pardnn.pipeline.report.
"""

from pardnn.emulator.memory import MemoryProfile, track_memory
from pardnn.emulator.scheduler import Schedule, simulate

__all__ = ["MemoryProfile", "Schedule", "simulate", "track_memory"]

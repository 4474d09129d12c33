"""The Fernandez-Bussell lower bound on the step time with free communication
(pardnn.emulator.bounds.interval_bound_us over compute-only levels), used by
tools/bench_step1.py to tell a weak placement from a loose bound. `lower_bound_us` in
every report includes the same bound over communication-aware windows (docs/bounds.md).
"""

from __future__ import annotations

from pardnn.emulator.bounds import interval_bound_us
from pardnn.graph.levels import bottom_levels, top_levels


def interval_bound(graph, k: int, grid: int = 96, steps: int = 14) -> float:
    """Lower bound (us) on the makespan of any placement of `graph` on k devices."""
    p = graph.comp_us.astype(float)
    return interval_bound_us(p, top_levels(graph, p), bottom_levels(graph, p), k, 0.0, grid, steps)

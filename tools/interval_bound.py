"""A tighter lower bound on the step time than lower_bound_us = max(critical path,
total work / K): the Fernandez-Bussell bound (IEEE Trans. Computers, 1973) for K
identical devices and free communication, used by tools/bench_step1.py to tell a
weak placement from a loose bound.

For a candidate step time T, each op n of cost p must run inside [es(n), T - bl(n) +
p] (es: its top level, bl: its bottom level, both without communication). Whatever
the schedule, it runs at least min(overlap of [es, es + p], overlap of [T - bl, T -
bl + p]) inside an interval [a, b]. If those forced amounts exceed K (b - a) for some
interval, no schedule of K devices finishes by T. The smallest T that no interval
rules out, found by bisection, bounds every placement's step from below. Only the
intervals between points of a uniform grid over [0, T] are checked, so the result is
still a valid bound, just possibly below the exact one.
"""

from __future__ import annotations

import numpy as np

from pardnn.graph.levels import bottom_levels, top_levels


def interval_bound(graph, k: int, grid: int = 96, steps: int = 14) -> float:
    """Lower bound (us) on the makespan of any placement of `graph` on k devices."""
    p = graph.comp_us.astype(float)
    es, bl = top_levels(graph, p), bottom_levels(graph, p)
    keep = p > 0
    es, bl, p = es[keep], bl[keep], p[keep]
    lo = max(float((es + bl).max(initial=0.0)), float(p.sum()) / k)
    if not _ruled_out(lo, es, bl, p, k, grid):
        return lo
    hi = 3.0 * lo
    for _ in range(steps):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if _ruled_out(mid, es, bl, p, k, grid) else (lo, mid)
    return lo


def _ruled_out(t, es, bl, p, k, grid) -> bool:
    """Whether some grid interval of [0, t] must hold more work than k devices can run."""
    points = np.linspace(0.0, t, grid)
    early = np.clip(points[:, None] - es[None, :], 0.0, p[None, :])     # done by each point, as early as possible
    late = np.clip(points[:, None] - (t - bl)[None, :], 0.0, p[None, :])  # ... as late as possible
    for i in range(grid - 1):
        forced = np.minimum(early[i + 1:] - early[i], late[i + 1:] - late[i]).sum(axis=1)
        if np.any(forced > k * (points[i + 1:] - points[i]) * (1 + 1e-9) + 1e-6):
            return True
    return False

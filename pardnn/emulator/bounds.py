"""Lower bounds on the emulated step of EVERY placement of a graph on a cluster: the
emulator's parts of the step lower bound (docs/bounds.md), which
pardnn.pipeline.bounds.step_lower_bound joins with the exact model's proven bound. The
bounds of ONE placement, which refinement prunes its trials with, are apart from
these, in pardnn.emulator.trial.

Under the relaxed model (docs/bounds.md, "What every emulated schedule obeys") each op
takes at least its time on the device that runs it fastest (`fastest_times`), so the
step lasts at least the costliest path at those times; the devices run at most their
summed rates of work; a path pays the transfers every placement forces; and on small
graphs the interval bound counts where the windows these leave each op meet the K
limit.
"""

import numpy as np

from pardnn.graph.forced_levels import start_and_tail_floors
from pardnn.graph.levels import critical_path_us
from pardnn.graph.op_rates import fastest_times

INTERVAL_MAX_NODES = 2_000   # the interval bound costs O(grid^2 n) per trial step time


def every_placement_parts(graph, cluster) -> dict:
    """The emulator's parts of the lower bound on every placement's emulated step, by
    name (pardnn.pipeline.bounds.StepLowerBound's fields): "critical_path_us" (the
    costliest path, each op at its fastest device's time, communication free),
    "work_per_device_us" (total work over the devices' summed rates),
    "forced_transfers_us" (max over nodes of est(n) + p(n) + tail(n), where est and
    tail are communication-aware floors on a node's start and on the time after its
    finish, pardnn.graph.forced_levels) and, on graphs of at most INTERVAL_MAX_NODES and
    K > 1, "interval_us" (the interval bound over the windows they leave each op, never
    below the two before it). Found once per graph and cluster (the graph's memo)."""
    return dict(graph.memoized(("every_placement_parts", cluster), lambda: _every_placement_parts(graph, cluster)))


def _every_placement_parts(graph, cluster) -> dict:
    if graph.num_nodes == 0:
        return {"critical_path_us": 0.0, "work_per_device_us": 0.0, "forced_transfers_us": 0.0}
    p = np.asarray(fastest_times(graph, cluster), np.float64)      # each op on its fastest device
    bounds = {"work_per_device_us": _work_bound_us(graph, cluster, p)}
    comm = edge_comm_floor_us(graph, cluster)
    est, tail = start_and_tail_floors(graph, p, comm)
    bounds["forced_transfers_us"] = float((est + p + tail).max())
    if graph.num_nodes <= INTERVAL_MAX_NODES and cluster.num_devices > 1:
        bounds["interval_us"] = interval_bound_us(p, est, tail + p, cluster.num_devices, max(bounds.values()))
    return {"critical_path_us": critical_path_us(graph, p), **bounds}


def _work_bound_us(graph, cluster, p) -> float:
    """Total work / K; on devices of different speeds the largest of sum(p) / K (p: each
    op on its fastest device), each class's profiled work over the devices' summed rates
    for it, and all work over the devices' summed best rates: in a step of length T,
    device d runs at most T x rate(c, d) of class c's profiled work, and at most T x its
    best rate of all of it (pardnn.graph.op_rates)."""
    spread = float(p.sum()) / cluster.num_devices
    if cluster.uniform:
        return spread
    work = np.bincount(graph.rate_class, graph.comp_us, minlength=cluster.rates.shape[0])
    per_class = work / cluster.rates.sum(axis=1)
    return max(spread, float(per_class.max()), float(work.sum()) / float(cluster.rates.max(axis=0).sum()))


def edge_comm_floor_us(graph, cluster) -> np.ndarray:
    """Per edge, the least time its tensor needs to reach another device: the cheapest
    latency plus bytes over the widest link (inf on one device, or inside a colocation
    group, whose ends always share a device)."""
    comm = cluster.cheapest_transfer_us(graph.edge_bytes)
    comm[graph.group[graph.edge_src] == graph.group[graph.edge_dst]] = np.inf
    return comm


def interval_bound_us(p, es, bl, k: int, lo: float, grid: int = 96, steps: int = 14) -> float:
    """The Fernandez-Bussell bound (IEEE Trans. Computers, 1973) for K devices: op n of
    cost p runs inside [es(n), T - bl(n) + p(n)] in every schedule no longer than T (es a
    floor on its start, bl on its cost plus the time after it). Whatever the schedule,
    it runs at least min(overlap of [es, es + p], overlap of [T - bl, T - bl + p]) inside
    an interval [a, b]; if those forced amounts exceed K (b - a) for some interval, no
    schedule finishes by T. Bisection from `lo` (a known bound) finds the largest T shown
    impossible, checking the intervals between points of a uniform grid over [0, T]."""
    keep = p > 0
    es, bl, p = es[keep], bl[keep], p[keep]
    lo = max(lo, float((es + bl).max(initial=0.0)), float(p.sum()) / k)
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

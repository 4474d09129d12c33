"""Lower bounds on the emulated step of one placement, at a fraction of an emulation's
cost, so that refinement can drop trials that cannot win without emulating them
(pardnn.emulator.trial.emulate tries the cheaper one first).

Under the scheduler's model (pardnn.emulator.scheduler) a device runs one op at a
time, so the step lasts at least the work placed on its busiest device; and a node
starts no earlier than each input arrives, a cross-device input no earlier than its
producer's finish plus the transfer's `bytes / bandwidth + latency`, so the step
lasts at least the costliest path with those transfer costs on the cut edges. Both
ignore queueing and link contention, which only add time.
"""

import numpy as np

from pardnn.emulator.scheduler import plan_transfers
from pardnn.graph.forced_levels import start_and_tail_floors
from pardnn.graph.levels import bottom_levels
from pardnn.graph.op_rates import fastest_times, node_times


def busiest_device_us(graph, cluster, device) -> float:
    """The work placed on the busiest device (one bincount, far cheaper than the path)."""
    if graph.num_nodes == 0:
        return 0.0
    return float(np.bincount(np.asarray(device, np.int64), node_times(graph, cluster, device),
                             minlength=cluster.num_devices).max())


def longest_path_us(graph, cluster, device) -> float:
    """The costliest path, each cut edge costing its transfer's `bytes / bandwidth + latency`."""
    if graph.num_nodes == 0:
        return 0.0
    device = np.asarray(device, np.int64)
    edge_transfer, _, _, occupancy, latency = plan_transfers(graph, cluster, device)
    cross = edge_transfer >= 0
    edge_cost = np.zeros(graph.num_edges)
    edge_cost[cross] = occupancy[edge_transfer[cross]] + latency[edge_transfer[cross]]
    return float(bottom_levels(graph, node_times(graph, cluster, device), edge_cost).max())


# ------------------------------------------------- the bound on every placement's step
INTERVAL_MAX_NODES = 2_000   # the interval bound costs O(grid^2 n) per trial step time


def step_lower_bound_us(graph, cluster) -> float:
    """A lower bound on the emulated step of EVERY placement of `graph` on `cluster`:
    the largest of `step_lower_bounds` (docs/bounds.md has the proofs)."""
    return max(step_lower_bounds(graph, cluster).values())


def step_lower_bounds(graph, cluster) -> dict:
    """The bounds on every placement's emulated step, by name: "work_per_device_us"
    (total work / K), "forced_transfers_us" (max over nodes of est(n) + p(n) + tail(n),
    where est and tail are communication-aware floors on a node's start and on the time
    after its finish, pardnn.graph.forced_levels) and, on graphs of at most
    INTERVAL_MAX_NODES and K > 1, "interval_us" (the interval bound over the windows
    they leave each op, never below the other two). `pardnn explain` names the one that
    binds. Found once per graph and cluster (the graph's memo)."""
    return dict(graph.memoized(("step_lower_bounds", cluster), lambda: _step_lower_bounds(graph, cluster)))


def _step_lower_bounds(graph, cluster) -> dict:
    if graph.num_nodes == 0:
        return {"work_per_device_us": 0.0, "forced_transfers_us": 0.0}
    p = np.asarray(fastest_times(graph, cluster), np.float64)      # each op on its fastest device
    bounds = {"work_per_device_us": _work_bound_us(graph, cluster, p)}
    comm = edge_comm_floor_us(graph, cluster)
    est, tail = start_and_tail_floors(graph, p, comm)
    bounds["forced_transfers_us"] = float((est + p + tail).max())
    if graph.num_nodes <= INTERVAL_MAX_NODES and cluster.num_devices > 1:
        bounds["interval_us"] = interval_bound_us(p, est, tail + p, cluster.num_devices, max(bounds.values()))
    return bounds


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

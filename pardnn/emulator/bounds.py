"""Lower bounds on the emulated step of one placement, at a fraction of an emulation's
cost, so that refinement can drop trials that cannot win without emulating them
(pardnn.placers.pardnn.refinement.cannot_beat tries the cheaper one first).

Under the scheduler's model (pardnn.emulator.scheduler) a device runs one op at a
time, so the step lasts at least the work placed on its busiest device; and a node
starts no earlier than each input arrives, a cross-device input no earlier than its
producer's finish plus the transfer's `bytes / bandwidth + latency`, so the step
lasts at least the costliest path with those transfer costs on the cut edges. Both
ignore queueing and link contention, which only add time.
"""

import weakref

import numpy as np

from pardnn.emulator.scheduler import plan_transfers
from pardnn.graph.forced_levels import start_and_tail_floors
from pardnn.graph.levels import bottom_levels


def busiest_device_us(graph, cluster, device) -> float:
    """The work placed on the busiest device (one bincount, far cheaper than the path)."""
    if graph.num_nodes == 0:
        return 0.0
    return float(np.bincount(np.asarray(device, np.int64), graph.comp_us, minlength=cluster.num_devices).max())


def longest_path_us(graph, cluster, device) -> float:
    """The costliest path, each cut edge costing its transfer's `bytes / bandwidth + latency`."""
    if graph.num_nodes == 0:
        return 0.0
    edge_transfer, _, _, occupancy, latency = plan_transfers(graph, cluster, np.asarray(device, np.int64))
    cross = edge_transfer >= 0
    edge_cost = np.zeros(graph.num_edges)
    edge_cost[cross] = occupancy[edge_transfer[cross]] + latency[edge_transfer[cross]]
    return float(bottom_levels(graph, graph.comp_us, edge_cost).max())


# ------------------------------------------------- the bound on every placement's step
_STEP_BOUNDS = weakref.WeakKeyDictionary()


def step_lower_bound_us(graph, cluster) -> float:
    """A lower bound on the emulated step of EVERY placement of `graph` on `cluster`:
    the larger of total work / K and max over nodes of est(n) + p(n) + tail(n), where
    est and tail are communication-aware lower bounds on a node's start and on the time
    after its finish (pardnn.graph.forced_levels; docs/bounds.md has the proof). Cached per graph
    and cluster."""
    per_graph = _STEP_BOUNDS.setdefault(graph, {})
    key = id(cluster)
    if key not in per_graph or per_graph[key][0] is not cluster:
        per_graph[key] = (cluster, _step_lower_bound_us(graph, cluster))
    return per_graph[key][1]


def _step_lower_bound_us(graph, cluster) -> float:
    if graph.num_nodes == 0:
        return 0.0
    p = np.asarray(graph.comp_us, np.float64)
    work = float(p.sum()) / cluster.num_devices
    comm = edge_comm_floor_us(graph, cluster)
    est, tail = start_and_tail_floors(graph, p, comm)
    return max(work, float((est + p + tail).max()))


def edge_comm_floor_us(graph, cluster) -> np.ndarray:
    """Per edge, the least time its tensor needs to reach another device: the cheapest
    latency plus bytes over the widest link (inf on one device, or inside a colocation
    group, whose ends always share a device)."""
    comm = cluster.cheapest_transfer_us(graph.edge_bytes)
    comm[graph.group[graph.edge_src] == graph.group[graph.edge_dst]] = np.inf
    return comm

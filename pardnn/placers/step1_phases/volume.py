"""Communication moves: a node whose cut edges cost more time than it computes
follows its data (a refinement step that is not in the thesis).

Slicing keeps paths together, but a path cannot hold a fan-in: in a recurrent
network the weight gradient of every time step (a full weight-sized tensor)
flows into one AddN, and a weight's read feeds every step. When LALB spreads the
steps, those big tensors cross devices, and on a serialised link they queue. For
each node with such edges this step finds the allowed device where its edges'
total transfer time (latency + bytes / bandwidth, on the real links, 0 within a
device) is least; it moves there, with its colocation group, when the transfer
time saved exceeds the group's compute time, the most it can add to any device's
work. The caller emulates the moves and keeps them only if the step gets faster.
"""

import numpy as np

from pardnn.base.compiled import INTERPRETED_BELOW, kernel
from pardnn.graph.edge_costs import placed_edge_costs


def comm_moves(graph, cluster, device, allowed) -> list:
    """[(gain_us, group, device)], largest gain first, one per group."""
    cut = placed_edge_costs(graph, cluster, device)
    n = graph.num_nodes
    heavy = np.bincount(graph.edge_src, cut, n) + np.bincount(graph.edge_dst, cut, n)
    has = np.zeros(graph.num_groups, bool)
    has[graph.group[heavy > graph.comp_us]] = True
    groups = np.flatnonzero(has)
    if len(groups) == 0:
        return []
    cost = _cost_by_device(graph, cluster, device, groups)
    cost[~allowed[groups]] = np.inf
    best = np.argmin(cost, axis=1)
    here = device[graph.group_nodes[graph.group_ptr[groups]]]
    rows = np.arange(len(groups))
    group_comp = np.bincount(graph.group, graph.comp_us, minlength=graph.num_groups)[groups]
    gain = cost[rows, here] - cost[rows, best] - group_comp
    keep = np.flatnonzero(gain > 0.0)
    keep = keep[np.lexsort((groups[keep], -gain[keep]))]
    return list(zip(gain[keep].tolist(), groups[keep].tolist(), best[keep].tolist()))


def _cost_by_device(graph, cluster, device, groups) -> np.ndarray:
    """(groups x devices): transfer time of each group's edges to nodes outside
    it if the group ran on each device."""
    k = cluster.num_devices
    lat = np.where(np.eye(k, dtype=bool), 0.0, cluster.latency_us).ravel()
    inv = np.where(np.eye(k, dtype=bool), 0.0, 1.0 / cluster.bandwidth).ravel()
    row = np.full(graph.num_groups, -1)
    row[groups] = np.arange(len(groups))
    gs, gd = row[graph.group[graph.edge_src]], row[graph.group[graph.edge_dst]]
    inside = graph.group[graph.edge_src] == graph.group[graph.edge_dst]
    out = np.flatnonzero((gs >= 0) & ~inside)          # the group sends to device of dst
    into = np.flatnonzero((gd >= 0) & ~inside)         # the group receives from device of src
    rows, nbytes = np.concatenate([gs[out], gd[into]]), graph.edge_bytes[np.concatenate([out, into])]
    # link (j, device of dst) for a sent edge, (device of src, j) for a received one
    link = np.concatenate([device[graph.edge_dst[out]], device[graph.edge_src[into]] * k])
    step = np.concatenate([np.full(len(out), k), np.ones(len(into), np.int64)])
    args = (rows, link, step, nbytes, lat, inv, len(groups), k)
    return _cost_sums_by_bincount(*args) if graph.num_nodes < INTERPRETED_BELOW else _cost_sums.compiled(*args)


def _cost_sums_by_bincount(rows, link, step, nbytes, lat, inv, n_rows, k):
    """`_cost_sums` column by column with numpy (small graphs: a hundred times faster than
    the kernel's interpreted loop; the same sums, bincount adding in edge order)."""
    cost = np.empty((n_rows, k))
    for j in range(k):
        pair = link + j * step
        cost[:, j] = np.bincount(rows, lat[pair] + nbytes * inv[pair], n_rows)
    return cost


@kernel
def _cost_sums(rows, link, step, nbytes, lat, inv, n_rows, k):
    """cost[r, j]: over the edges e of row r in order (those sent first), the sum of
    lat + bytes * inv on link link[e] + j * step[e] (the link e would take with its
    group on device j). The sums of numpy.bincount, column by column, to the bit."""
    cost = np.zeros((n_rows, k))
    for e in range(len(rows)):
        r = rows[e]
        for j in range(k):
            pair = link[e] + j * step[e]
            cost[r, j] += lat[pair] + nbytes[e] * inv[pair]
    return cost

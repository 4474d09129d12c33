"""HEFT (Topcuoglu, Hariri and Wu 2002): upward rank, then earliest finish time
with insertion.

1. Priorities: the upward rank of a node is its mean compute cost plus the
   largest (mean communication cost + upward rank) over its successors, i.e. its
   bottom level with the mean link cost on every edge (`pardnn.graph.levels`). On
   alike devices the mean compute cost is the measured one; on devices of different
   speeds (pardnn.graph.op_rates) it is the mean over the devices, as in the paper.
2. Nodes are taken in decreasing rank (ties: smaller node id, which keeps the
   order topological when costs are zero) and each goes to the device on which it
   finishes earliest (ties: the lowest device index). A node may be inserted into
   an idle gap between two nodes already scheduled on a device if the gap is long
   enough and starts after the node's inputs have arrived there (insertion-based
   policy).

Colocation groups follow their first member to be scheduled; pinned groups only
consider devices of their kind. HEFT is not memory-aware.

`schedule` is the core on an explicit (nodes x devices) cost matrix, so the
textbook heterogeneous example can be checked against it. Its loop is a kernel
(pardnn.base.compiled), built like m-ETF's (`pardnn.placers.etf`): the
arrays arrive in the shared `Graph` tuple, and each device's idle gaps are sorted
arrays in chunks of CHUNK gaps with each chunk's widest, so a query skips chunks
too narrow for the node.
"""

import numpy as np

from pardnn.base.compiled import kernel
from pardnn.graph.constraints import allowed_devices
from pardnn.graph.edge_costs import mean_edge_costs
from pardnn.graph.levels import bottom_levels
from pardnn.graph.op_rates import time_matrix
from pardnn.placers.common import graph_arrays, link_tables

CHUNK = 64      # gaps per chunk of a device's idle gaps


def place(graph, cluster, timings=None) -> np.ndarray:
    cost = time_matrix(graph, cluster)
    mean = graph.comp_us if cluster.uniform else cost.mean(axis=1)
    rank = bottom_levels(graph, mean, mean_edge_costs(graph, cluster))
    order = np.lexsort((np.arange(graph.num_nodes), -rank))
    lat, inv_bw = link_tables(cluster)
    device, _, _ = schedule(graph, order, cost, lat, inv_bw, allowed_devices(graph, cluster))
    return device


def schedule(graph, order, cost, lat, inv_bw, allowed):
    """Insertion-based earliest-finish-time scheduling of `graph`'s nodes in
    `order` (each node after its predecessors). cost[v, d] is v's compute time on
    device d; a tensor of b bytes from device a to d arrives lat[a][d] +
    b * inv_bw[a][d] after its producer finishes; allowed[group, d] says where each
    colocation group may go. Returns (device, start, finish)."""
    run = _schedule.for_size(graph.num_nodes)
    device, start, finish = run(graph_arrays(graph), np.asarray(order, np.int64), np.asarray(cost, np.float64),
                                np.asarray(lat, np.float64), np.asarray(inv_bw, np.float64),
                                np.asarray(allowed, np.bool_), CHUNK)
    return device.astype(np.int32), start, finish


@kernel
def _schedule(g, order, cost, lat, inv_bw, allowed, chunk):
    """Places the nodes in order, each where it finishes first; returns (device, start, finish).
    Each device's idle gaps are kept in chunks of `chunk`."""
    n, k = cost.shape
    device, start, finish = np.full(n, -1), np.zeros(n), np.zeros(n)
    fixed, ready = np.full(allowed.shape[0], -1), np.zeros(k)
    tail, gaps = np.zeros(k), np.zeros(k, np.int64)     # per device: end of its last busy interval; gaps before it
    lo, hi, wide = np.zeros((k, chunk)), np.zeros((k, chunk)), np.zeros((k, 1))    # gaps [lo, hi); chunks' widest

    def arrival(v):
        """ready[d]: when all of v's inputs are on device d."""
        ready[:] = 0.0
        for p in range(g.pred_ptr[v], g.pred_ptr[v + 1]):
            u = g.pred_src[p]
            f, du, b = finish[u], device[u], g.edge_bytes[g.pred_eid[p]]
            for d in range(k):
                t = f + lat[du, d] + b * inv_bw[du, d]
                if t > ready[d]:
                    ready[d] = t

    def earliest(lo, hi, wide, count, end, t, length):
        """Earliest start >= t of an idle slot of `length` among the gaps, else `end`."""
        if t >= end:
            return t
        i = max(np.searchsorted(lo[:count], t, side="right") - 1, 0)
        while i < count:
            if i % chunk == 0 and wide[i // chunk] < length:
                i += chunk                      # no gap of this chunk is long enough
                continue
            s = lo[i] if lo[i] > t else t
            if hi[i] - s >= length:
                return s
            i += 1
        return end

    def widest(lo, hi, wide, count, first, last):
        """Recompute the widest gap of the chunks holding gaps first to last - 1 (of count)."""
        for c in range(first // chunk, (last + chunk - 1) // chunk):
            w = 0.0
            for i in range(c * chunk, min(count, (c + 1) * chunk)):
                w = max(w, hi[i] - lo[i])
            wide[c] = w

    def doubled(a):
        out = np.zeros((k, 2 * a.shape[1]))
        out[:, :a.shape[1]] = a
        return out

    def add(lo, hi, wide, d, s, f):
        """Device d is busy from s to f: past its tail, or inside the gap holding s,
        which leaves its nonempty pieces."""
        count = gaps[d]
        if s >= tail[d]:
            if s > tail[d]:
                lo[count], hi[count] = tail[d], s
                gaps[d] = count + 1
                c = count // chunk
                wide[c] = s - tail[d] if count % chunk == 0 else max(wide[c], s - tail[d])
            tail[d] = f
            return
        j = np.searchsorted(lo[:count], s, side="right") - 1
        a, b = lo[j], hi[j]
        pieces = int(s > a) + int(b > f)
        if pieces == 2:                         # one gap more: shift the later ones right
            for i in range(count, j + 1, -1):
                lo[i], hi[i] = lo[i - 1], hi[i - 1]
        elif pieces == 0:                       # one gap less: shift them left
            for i in range(j, count - 1):
                lo[i], hi[i] = lo[i + 1], hi[i + 1]
        if s > a:
            hi[j] = s
        if b > f:
            lo[j + pieces - 1], hi[j + pieces - 1] = f, b
        gaps[d] = count + pieces - 1
        widest(lo, hi, wide, gaps[d], j, j + 1 if pieces == 1 else gaps[d])

    for v in order:
        arrival(v)
        grp = g.group[v]
        found, best_f, best_s, best_d = False, 0.0, 0.0, 0
        for d in range(k):
            if fixed[grp] != d and (fixed[grp] >= 0 or not allowed[grp, d]):
                continue
            if found and ready[d] + cost[v, d] >= best_f:
                continue                        # cannot beat the best finish so far
            s = earliest(lo[d], hi[d], wide[d], gaps[d], tail[d], ready[d], cost[v, d])
            if not found or s + cost[v, d] < best_f:
                found, best_f, best_s, best_d = True, s + cost[v, d], s, d
        if gaps[best_d] == lo.shape[1]:         # full: double every device's room
            lo, hi, wide = doubled(lo), doubled(hi), doubled(wide)
        add(lo[best_d], hi[best_d], wide[best_d], best_d, best_s, best_f)
        fixed[grp] = best_d
        device[v], start[v], finish[v] = best_d, best_s, best_f
    return device, start, finish

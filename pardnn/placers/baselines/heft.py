"""HEFT (Topcuoglu, Hariri and Wu 2002): upward rank, then earliest finish time
with insertion.

1. Priorities: the upward rank of a node is its mean compute cost plus the
   largest (mean communication cost + upward rank) over its successors, i.e. its
   bottom level with the mean link cost on every edge (`pardnn.graph.levels`). Our
   devices are homogeneous, so the mean compute cost is the measured one.
2. Nodes are taken in decreasing rank (ties: smaller node id, which keeps the
   order topological when costs are zero) and each goes to the device on which it
   finishes earliest. A node may be inserted into an idle gap between two nodes
   already scheduled on a device if the gap is long enough and starts after the
   node's inputs have arrived there (insertion-based policy).

Colocation groups follow their first member to be scheduled; pinned groups only
consider devices of their kind. HEFT is not memory-aware.

`schedule` is the core on an explicit (nodes x devices) cost matrix, so the
textbook heterogeneous example can be checked against it.
"""

from bisect import bisect_right

import numpy as np

from pardnn.graph.edge_costs import mean_edge_costs
from pardnn.placers.baselines.common import GroupDevices, data_ready, link_tables
from pardnn.graph.levels import bottom_levels


def place(graph, cluster, timings=None) -> np.ndarray:
    rank = bottom_levels(graph, graph.comp_us, mean_edge_costs(graph, cluster))
    order = np.lexsort((np.arange(graph.num_nodes), -rank))
    cost = np.broadcast_to(graph.comp_us[:, None], (graph.num_nodes, cluster.num_devices))
    lat, inv_bw = link_tables(cluster)
    device, _, _ = schedule(graph, order, cost, lat, inv_bw, GroupDevices(graph, cluster))
    return device


def schedule(graph, order, cost, lat, inv_bw, groups):
    """Insertion-based earliest-finish-time scheduling of `graph`'s nodes in
    `order` (each node after its predecessors). cost[v, d] is v's compute time on
    device d; a tensor of b bytes from device a to d arrives lat[a][d] +
    b * inv_bw[a][d] after its producer finishes. Returns (device, start, finish)."""
    n, k = cost.shape
    ptr, src, eid = graph.pred_ptr.tolist(), graph.pred_src.tolist(), graph.pred_eid.tolist()
    ebytes = graph.edge_bytes.tolist()
    device, start, finish = [-1] * n, [0.0] * n, [0.0] * n
    timelines = [_Timeline() for _ in range(k)]
    for v in np.asarray(order).tolist():
        ready = data_ready(v, ptr, src, eid, ebytes, finish, device, lat, inv_bw, k)
        row = cost[v].tolist()
        best = None
        for d in groups.choices(v):
            if best is not None and ready[d] + row[d] >= best[0]:
                continue                        # cannot beat the best finish so far
            s = timelines[d].earliest(ready[d], row[d])
            if best is None or s + row[d] < best[0]:
                best = (s + row[d], s, d)
        f, s, d = best
        timelines[d].add(s, f)
        groups.fix(v, d)
        device[v], start[v], finish[v] = d, s, f
    return np.asarray(device, np.int32), np.asarray(start), np.asarray(finish)


class _Timeline:
    """The idle gaps of one device before its last busy interval, sorted by start
    and kept in blocks of at most 2 * BLOCK with each block's widest gap, so a
    search skips whole blocks too narrow for the node: O(BLOCK + gaps / BLOCK)
    per query instead of a scan over every gap."""

    BLOCK = 64
    INF = float("inf")

    def __init__(self):
        self.blocks, self.widest, self.firsts = [], [], []   # gaps (start, end); per-block max; first starts
        self.tail = 0.0                                      # end of the last busy interval

    def earliest(self, ready, length) -> float:
        """Earliest start >= ready of an idle slot of `length`."""
        if ready >= self.tail:
            return ready
        b = max(bisect_right(self.firsts, ready) - 1, 0)
        for i in range(b, len(self.blocks)):
            if self.widest[i] < length:
                continue
            for gs, ge in self.blocks[i]:
                t = gs if gs > ready else ready
                if ge - t >= length:
                    return t
        return self.tail

    def add(self, s, f):
        if s >= self.tail:
            if s > self.tail:
                self._append((self.tail, s))
            self.tail = f
            return
        i = max(bisect_right(self.firsts, s) - 1, 0)
        block = self.blocks[i]
        j = bisect_right(block, (s, self.INF)) - 1
        gs, ge = block[j]
        block[j:j + 1] = [gap for gap in ((gs, s), (f, ge)) if gap[1] > gap[0]]
        if len(block) > 2 * self.BLOCK:
            self.blocks[i + 1:i + 1] = [block[self.BLOCK:]]
            self.widest[i + 1:i + 1] = [0.0]
            self.firsts[i + 1:i + 1] = [0.0]
            del block[self.BLOCK:]
            self._refresh(i + 1)
            self._refresh(i)
        elif ge - gs >= self.widest[i]:         # the widest gap shrank: scan the block
            self._refresh(i)
        elif j == 0:                            # narrower pieces: only the first start may move
            self.firsts[i] = block[0][0]

    def _refresh(self, i):
        block = self.blocks[i]
        if not block:
            del self.blocks[i], self.widest[i], self.firsts[i]
            return
        self.widest[i] = max(e - a for a, e in block)
        self.firsts[i] = block[0][0]

    def _append(self, gap):
        if not self.blocks or len(self.blocks[-1]) >= 2 * self.BLOCK:
            self.blocks.append([])
            self.widest.append(0.0)
            self.firsts.append(gap[0])
        self.blocks[-1].append(gap)
        self.widest[-1] = max(self.widest[-1], gap[1] - gap[0])

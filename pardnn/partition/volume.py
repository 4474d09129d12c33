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

from pardnn.levels import adjacency
from pardnn.partition.costs import placed_edge_costs


def comm_moves(graph, cluster, device, allowed) -> list:
    """[(gain_us, group, device)], largest gain first, one per group."""
    cut = placed_edge_costs(graph, cluster, device)
    heavy = np.zeros(graph.num_nodes)
    np.add.at(heavy, graph.edge_src, cut)
    np.add.at(heavy, graph.edge_dst, cut)
    group_comp = np.bincount(graph.group, graph.comp_us, minlength=graph.num_groups)
    groups = np.unique(graph.group[heavy > graph.comp_us])
    k = cluster.num_devices
    lat = np.where(np.eye(k, dtype=bool), 0.0, cluster.latency_us)
    inv = np.where(np.eye(k, dtype=bool), 0.0, 1.0 / cluster.bandwidth)
    edges = _GroupEdges(graph, device)
    moves = []
    for g in groups.tolist():
        cost = edges.cost_by_device(g, lat, inv)
        cost[~allowed[g]] = np.inf
        d = int(np.argmin(cost))
        gain = cost[edges.device_of(g)] - cost[d] - group_comp[g]
        if gain > 0.0:
            moves.append((float(gain), g, d))
    moves.sort(key=lambda m: (-m[0], m[1]))
    return moves


class _GroupEdges:
    """Per group: its edges to nodes outside it, by the other end's device."""

    def __init__(self, graph, device):
        self.graph = graph
        self.succ_ptr, self.dst, self.pred_ptr, self.pred_src, self.pred_eid = adjacency(graph)
        self.group, self.dev = graph.group.tolist(), device.tolist()
        self.nbytes = graph.edge_bytes.tolist()

    def device_of(self, g) -> int:
        return self.dev[int(self.graph.group_members(g)[0])]

    def cost_by_device(self, g, lat, inv) -> np.ndarray:
        """Per device d: transfer time of the group's edges if the group ran on d."""
        k = len(lat)
        out_count, out_bytes, in_count, in_bytes = (np.zeros(k) for _ in range(4))
        for x in self.graph.group_members(g).tolist():
            for e in range(self.succ_ptr[x], self.succ_ptr[x + 1]):
                y = self.dst[e]
                if self.group[y] != g:
                    out_count[self.dev[y]] += 1
                    out_bytes[self.dev[y]] += self.nbytes[e]
            for p in range(self.pred_ptr[x], self.pred_ptr[x + 1]):
                y = self.pred_src[p]
                if self.group[y] != g:
                    in_count[self.dev[y]] += 1
                    in_bytes[self.dev[y]] += self.nbytes[self.pred_eid[p]]
        return lat @ out_count + inv @ out_bytes + lat.T @ in_count + inv.T @ in_bytes

"""Graph slicing: K primary clusters, then secondary clusters (thesis §4.1.1,
"Graph slicing", Algorithm 1).

Primary cluster j is the critical path of the graph left after removing clusters
0..j-1, with levels recomputed on that remaining graph each time. The walk starts
at the remaining node of largest bottom level (the first such id, a source of the
remaining graph) and each step takes the successor that realises the bottom level,
i.e. the largest comm(e) + bl(v). This follows exactly the path of largest
tl + bl that Algorithm 1 describes, but compares bottom levels only, so that
floating-point rounding in tl + bl cannot make the walk leave the critical path.

Secondary clusters reuse the weighted levels w_lvl = tl + bl of the graph left after
the K primaries, without recomputing them (the thesis' choice, §6.4.2): the
remaining node of largest w_lvl starts a path, which follows the free successor of
largest w_lvl until none is left; a node with no free successor is a single-node
cluster. Ties always go to the lowest node id.

Colocation groups: a node's whole group joins the cluster that takes its first
member (the rest become followers that the path does not walk through). A group
cannot be one unit of a path, since its members are often far apart (a variable,
its read at the start of the step, its update at the end): contracting them would
put cycles in the DAG. Following the first member keeps every group inside one
cluster, so mapping, which moves whole clusters, can never split a group, and the
followers' work is counted where they will run. A path also never takes a node
whose group may not share a device with the groups already in the cluster (device
kinds, see pardnn.graph.constraints), so every cluster has at least one allowed device.
"""

from dataclasses import dataclass

import numpy as np

from pardnn.graph.levels import NEG_INF, bottom_levels_list, top_levels_list


@dataclass(frozen=True)
class Slices:
    """Clusters as arrays: `cluster[n]` is node n's cluster; clusters 0..num_primary-1
    are the primaries; `head[c]`/`tail[c]` are the first and last node of cluster
    c's path (followers are not on the path)."""

    cluster: np.ndarray
    head: np.ndarray
    tail: np.ndarray
    num_primary: int

    @property
    def num_clusters(self) -> int:
        return len(self.head)


def slice_graph(graph, k: int, edge_cost, masks) -> Slices:
    """Slice `graph` into at most `k` primary and any number of secondary clusters.

    edge_cost: per edge id, the cost of the edge if cut (before devices are known);
    masks: per group, the allowed devices as an int bit mask (costs.group_masks)."""
    walker = _Walker(graph, masks)
    ec = np.asarray(edge_cost, float).tolist()
    for _ in range(min(k, graph.num_nodes)):
        bl = bottom_levels_list(graph, walker.w, ec)
        walker.walk(int(np.argmax(bl)), ec, bl)
        if walker.left == 0:
            break
    num_primary = len(walker.head)
    if walker.left:
        _secondaries(graph, walker, ec)
    return Slices(np.asarray(walker.cid, np.int32), np.asarray(walker.head, np.int64),
                  np.asarray(walker.tail, np.int64), num_primary)


def _secondaries(graph, walker, ec):
    """Paths along the highest w_lvl of the graph left after the primaries."""
    tl = top_levels_list(graph, walker.w, ec)
    bl = bottom_levels_list(graph, walker.w, ec)
    wl = np.add(tl, bl)                      # -inf on nodes already in a cluster
    free = np.flatnonzero(wl > NEG_INF)
    order = free[np.argsort(-wl[free], kind="stable")].tolist()
    zero = [0.0] * graph.num_edges
    wl = wl.tolist()
    for s in order:
        if walker.cid[s] < 0:
            walker.walk(s, zero, wl)


class _Walker:
    """Cluster ids, node costs (-inf once taken) and the path walk."""

    def __init__(self, graph, masks):
        self.succ_ptr, self.dst = graph.adjacency_lists[:2]
        self.group = graph.group.tolist()
        self.gptr, self.gnodes = graph.group_ptr.tolist(), graph.group_nodes.tolist()
        self.masks = masks
        self.w = graph.comp_us.tolist()
        self.cid = [-1] * graph.num_nodes
        self.on_path = [False] * graph.num_nodes
        self.left = graph.num_nodes
        self.head, self.tail = [], []

    def walk(self, u, edge_score, node_score):
        """New cluster: the path from u along the largest edge_score[e] +
        node_score[v] among mask-compatible successors that are free or are
        followers of this cluster (so a path goes on through its own groups)."""
        c = len(self.head)
        self.head.append(u)
        cid, dst, group, masks, on_path = self.cid, self.dst, self.group, self.masks, self.on_path
        mask = -1
        while True:
            mask &= masks[group[u]]
            on_path[u] = True
            if cid[u] < 0:
                self._take(u, c)
            best, nxt = NEG_INF, -1
            for e in range(self.succ_ptr[u], self.succ_ptr[u + 1]):
                v = dst[e]
                if (cid[v] < 0 or (cid[v] == c and not on_path[v])) and masks[group[v]] & mask:
                    val = edge_score[e] + node_score[v]
                    if val > best:
                        best, nxt = val, v
            if nxt < 0:
                break
            u = nxt
        self.tail.append(u)

    def _take(self, u, c):
        """Put u and the rest of its colocation group into cluster c."""
        g = self.group[u]
        lo, hi = self.gptr[g], self.gptr[g + 1]
        members = (u,) if hi - lo == 1 else self.gnodes[lo:hi]
        for m in members:
            self.cid[m] = c
            self.w[m] = NEG_INF
        self.left -= len(members)

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

The walks are a kernel (pardnn.base.compiled) over the CSR arrays: 49k of them on a
200k-node graph, where a CPython loop per walk took most of slicing's time.
"""

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from pardnn.base.compiled import kernel
from pardnn.graph.levels import NEG_INF, bottom_levels, top_levels


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


class Walk(NamedTuple):
    """What the walks read and write, int64 and float64 per node or edge; `allowed` is
    the (groups x devices) bool matrix; `w` is a node's cost, -inf once taken."""

    succ_ptr: np.ndarray
    edge_dst: np.ndarray
    group: np.ndarray
    group_ptr: np.ndarray
    group_nodes: np.ndarray
    allowed: np.ndarray
    cluster: np.ndarray         # per node, -1 while free
    w: np.ndarray
    on_path: np.ndarray         # bool per node
    head: np.ndarray            # per cluster made so far (room for one per node)
    tail: np.ndarray


def slice_graph(graph, k: int, edge_cost, allowed) -> Slices:
    """Slice `graph` into at most `k` primary and any number of secondary clusters.

    edge_cost: per edge id, the cost of the edge if cut (before devices are known);
    allowed: the (groups x devices) bool matrix of pardnn.graph.constraints.allowed_devices."""
    n = graph.num_nodes
    walk, paths = _walk_arrays(graph, allowed), _walk_paths.for_size(n)
    ec = np.asarray(edge_cost, np.float64)
    clusters, left = 0, n
    for _ in range(min(k, n)):
        bl = bottom_levels(graph, walk.w, ec)
        clusters, taken = paths(walk, np.array([np.argmax(bl)], np.int64), ec, bl, clusters)
        left -= taken
        if left == 0:
            break
    num_primary = clusters
    if left:
        clusters = _secondaries(graph, walk, ec, paths, clusters)
    return Slices(walk.cluster.astype(np.int32), walk.head[:clusters].copy(), walk.tail[:clusters].copy(),
                  num_primary)


def _walk_arrays(graph, allowed) -> Walk:
    """Every node free, at its compute cost."""
    n, i64 = graph.num_nodes, np.int64
    groups = (np.asarray(a, i64) for a in (graph.group, graph.group_ptr, graph.group_nodes))
    return Walk(*graph.successor_arrays, *groups, np.asarray(allowed, np.bool_), np.full(n, -1, i64),
                np.array(graph.comp_us, np.float64), np.zeros(n, np.bool_), np.empty(n, i64), np.empty(n, i64))


def _secondaries(graph, walk, ec, paths, clusters) -> int:
    """Paths along the highest w_lvl of the graph left after the primaries; returns
    the number of clusters."""
    wl = top_levels(graph, walk.w, ec) + bottom_levels(graph, walk.w, ec)   # -inf on taken nodes
    free = np.flatnonzero(wl > NEG_INF)
    order = free[np.argsort(-wl[free], kind="stable")]
    return paths(walk, order, np.zeros(graph.num_edges), wl, clusters)[0]


@kernel
def _walk_paths(g, starts, edge_score, node_score, clusters):
    """From each of `starts` still free, in turn, a new cluster: the path along the
    largest edge_score[e] + node_score[v] among the successors that are free or
    followers of this cluster (so a path goes on through its own groups) and whose
    group allows a device that every group on the path allows. Returns (clusters
    made in all, nodes taken)."""
    k = g.allowed.shape[1]
    mask = np.empty(k, np.bool_)            # devices every group on the path allows
    cluster, on_path = g.cluster, g.on_path
    taken = 0

    def compatible(v):
        for d in range(k):
            if mask[d] and g.allowed[g.group[v], d]:
                return True
        return False

    def take(u, c):
        """u and the rest of its colocation group join cluster c; returns how many."""
        grp = g.group[u]
        for i in range(g.group_ptr[grp], g.group_ptr[grp + 1]):
            cluster[g.group_nodes[i]] = c
            g.w[g.group_nodes[i]] = -np.inf
        return g.group_ptr[grp + 1] - g.group_ptr[grp]

    for u in starts:
        if cluster[u] >= 0:
            continue
        c = clusters
        clusters += 1
        g.head[c] = u
        mask[:] = True
        while True:
            for d in range(k):
                mask[d] = mask[d] and g.allowed[g.group[u], d]
            on_path[u] = True
            if cluster[u] < 0:
                taken += take(u, c)
            best, nxt = -np.inf, -1
            for e in range(g.succ_ptr[u], g.succ_ptr[u + 1]):
                v = g.edge_dst[e]
                if (cluster[v] < 0 or (cluster[v] == c and not on_path[v])) and compatible(v):
                    val = edge_score[e] + node_score[v]
                    if val > best:
                        best, nxt = val, v
            if nxt < 0:
                break
            u = nxt
        g.tail[c] = u
    return clusters, taken

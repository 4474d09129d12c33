"""Top and bottom levels of the DAG (thesis Table 4.2).

tl(n): length of the costliest path from a source to n, excluding n.
bl(n): length of the costliest path from n to a sink, including n.
A path's length sums its nodes' compute costs and its edges' communication costs,
so tl(n) + bl(n) is the weighted level w_lvl(n) and max bl is the critical path.
Nodes are in topological order (CostGraph ids), so one forward and one backward
sweep suffice: O(V + E).

A node whose cost is -inf counts as removed from the graph (thesis Algorithm 1
removes each critical path before recomputing levels): it lies on no path, its bl
and tl are -inf, and its neighbours see it as absent.

ParDNN's slicing runs these sweeps K+1 times and refinement's bounds and move
finders many more. Both are loops over the CSR arrays, kernels (pardnn.base.compiled:
compiled with numba on large graphs), not numpy calls per depth level: training
graphs are deep and narrow, so per-level calls would cost more than the loop
(measurements in docs/algorithm.md, "Costs").
"""

import numpy as np

from pardnn.base.compiled import kernel

NEG_INF = float("-inf")


def top_levels(graph, node_cost, edge_cost=None) -> np.ndarray:
    """tl per node; edge_cost is indexed by edge id (None: zero communication)."""
    w = np.asarray(node_cost, float)
    tl = _top_levels.for_size(len(w))(*graph.successor_arrays, w, _edge_costs(graph, edge_cost))
    tl[w == NEG_INF] = NEG_INF
    return tl


@kernel
def _top_levels(succ_ptr, edge_dst, w, ec):
    """Push form: each node offers tl(u) + w(u) + comm(e) to its successors, reading
    the successor CSR whose positions are the edge ids."""
    tl = np.zeros(w.shape[0])
    for u in range(w.shape[0]):
        fu = tl[u] + w[u]
        if fu == -np.inf:
            continue
        for e in range(succ_ptr[u], succ_ptr[u + 1]):
            tl[edge_dst[e]] = max(tl[edge_dst[e]], fu + ec[e])
    return tl


def bottom_levels(graph, node_cost, edge_cost=None) -> np.ndarray:
    """bl per node; edge_cost is indexed by edge id (None: zero communication)."""
    w = np.asarray(node_cost, float)
    return _bottom_levels.for_size(len(w))(*graph.successor_arrays, w, _edge_costs(graph, edge_cost))


@kernel
def _bottom_levels(succ_ptr, edge_dst, w, ec):
    """Pull form, from the last node back: bl(u) = w(u) + the costliest comm + bl of
    a successor (0 for a sink); -inf for removed nodes."""
    bl = np.full(w.shape[0], -np.inf)
    for u in range(w.shape[0] - 1, -1, -1):
        if w[u] == -np.inf:
            continue
        best = 0.0
        for e in range(succ_ptr[u], succ_ptr[u + 1]):
            best = max(best, ec[e] + bl[edge_dst[e]])
        bl[u] = best + w[u]
    return bl


def critical_path_us(graph, node_cost=None, edge_cost=None) -> float:
    """Length of the costliest path (compute only when edge_cost is None)."""
    if graph.num_nodes == 0:
        return 0.0
    cost = graph.comp_us if node_cost is None else node_cost
    return float(bottom_levels(graph, cost, edge_cost).max())


def _edge_costs(graph, edge_cost) -> np.ndarray:
    return np.zeros(graph.num_edges) if edge_cost is None else np.asarray(edge_cost, float)

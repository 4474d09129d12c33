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

ParDNN's slicing runs these sweeps K+1 times. Both are plain loops over Python
lists of the CSR arrays (cached per graph), not numpy calls per depth level:
training graphs are deep and narrow, so per-level calls would cost more than the
loop (measurements in docs/algorithm.md, "Costs").
"""

import weakref

import numpy as np

NEG_INF = float("-inf")
_ADJACENCY = weakref.WeakKeyDictionary()


def adjacency(graph):
    """(succ_ptr, edge_dst, pred_ptr, pred_src, pred_eid) as Python lists, cached."""
    lists = _ADJACENCY.get(graph)
    if lists is None:
        lists = (graph.succ_ptr.tolist(), graph.edge_dst.tolist(), graph.pred_ptr.tolist(),
                 graph.pred_src.tolist(), graph.pred_eid.tolist())
        _ADJACENCY[graph] = lists
    return lists


def top_levels(graph, node_cost, edge_cost=None) -> np.ndarray:
    """tl per node; edge_cost is indexed by edge id (None: zero communication)."""
    w = _as_list(node_cost)
    tl = top_levels_list(graph, w, _edge_costs(graph, edge_cost))
    out = np.asarray(tl, float)
    out[np.asarray(w, float) == NEG_INF] = NEG_INF
    return out


def top_levels_list(graph, w, ec) -> list:
    """tl as a list, from lists of node and edge costs (the hot loop).

    Push form: each node offers tl(u) + w(u) + comm(e) to its successors, reading
    the successor CSR whose positions are the edge ids."""
    ptr, dst = adjacency(graph)[:2]
    tl = [0.0] * len(w)
    for u in range(len(w)):
        fu = tl[u] + w[u]
        if fu == NEG_INF:
            continue
        for e in range(ptr[u], ptr[u + 1]):
            c = fu + ec[e]
            v = dst[e]
            if c > tl[v]:
                tl[v] = c
    return tl


def bottom_levels(graph, node_cost, edge_cost=None) -> np.ndarray:
    """bl per node; edge_cost is indexed by edge id (None: zero communication)."""
    return np.asarray(bottom_levels_list(graph, _as_list(node_cost), _edge_costs(graph, edge_cost)), float)


def bottom_levels_list(graph, w, ec) -> list:
    """bl as a list, from lists of node and edge costs (the hot loop)."""
    ptr, dst = adjacency(graph)[:2]
    bl = [NEG_INF] * len(w)
    for u in range(len(w) - 1, -1, -1):
        if w[u] == NEG_INF:
            continue
        best = 0.0
        for e in range(ptr[u], ptr[u + 1]):
            c = ec[e] + bl[dst[e]]
            if c > best:
                best = c
        bl[u] = best + w[u]
    return bl


def critical_path_us(graph, node_cost=None, edge_cost=None) -> float:
    """Length of the costliest path (compute only when edge_cost is None)."""
    if graph.num_nodes == 0:
        return 0.0
    cost = graph.comp_us if node_cost is None else node_cost
    return float(bottom_levels(graph, cost, edge_cost).max())


def _as_list(values) -> list:
    return np.asarray(values, float).tolist()


def _edge_costs(graph, edge_cost) -> list:
    if edge_cost is None:
        return [0.0] * graph.num_edges
    return _as_list(edge_cost)

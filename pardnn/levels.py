"""Top and bottom levels of the DAG (thesis Table 4.2).

tl(n): length of the costliest path from a source to n, excluding n.
bl(n): length of the costliest path from n to a sink, including n.
A path's length sums its nodes' compute costs and its edges' communication costs,
so tl(n) + bl(n) is the weighted level w_lvl(n) and max bl is the critical path.
Nodes are in topological order (CostGraph ids), so one forward and one backward
sweep suffice: O(V + E).
"""

import numpy as np


def top_levels(graph, node_cost, edge_cost=None) -> np.ndarray:
    """tl per node; edge_cost is indexed by edge id (None: zero communication)."""
    w = np.asarray(node_cost, float).tolist()
    ec = _edge_costs(graph, edge_cost)
    ptr, src, eid = graph.pred_ptr.tolist(), graph.pred_src.tolist(), graph.pred_eid.tolist()
    tl = [0.0] * graph.num_nodes
    for v in range(graph.num_nodes):
        best = 0.0
        for p in range(ptr[v], ptr[v + 1]):
            u = src[p]
            c = tl[u] + w[u] + ec[eid[p]]
            if c > best:
                best = c
        tl[v] = best
    return np.asarray(tl)


def bottom_levels(graph, node_cost, edge_cost=None) -> np.ndarray:
    """bl per node; edge_cost is indexed by edge id (None: zero communication)."""
    w = np.asarray(node_cost, float).tolist()
    ec = _edge_costs(graph, edge_cost)
    ptr, dst = graph.succ_ptr.tolist(), graph.edge_dst.tolist()
    bl = [0.0] * graph.num_nodes
    for u in range(graph.num_nodes - 1, -1, -1):
        best = 0.0
        for e in range(ptr[u], ptr[u + 1]):
            c = ec[e] + bl[dst[e]]
            if c > best:
                best = c
        bl[u] = best + w[u]
    return np.asarray(bl)


def critical_path_us(graph, node_cost=None, edge_cost=None) -> float:
    """Length of the costliest path (compute only when edge_cost is None)."""
    if graph.num_nodes == 0:
        return 0.0
    cost = graph.comp_us if node_cost is None else node_cost
    return float(bottom_levels(graph, cost, edge_cost).max())


def _edge_costs(graph, edge_cost):
    if edge_cost is None:
        return [0.0] * graph.num_edges
    return np.asarray(edge_cost, float).tolist()

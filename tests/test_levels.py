"""Top and bottom levels against a networkx oracle and, to the bit, against a readable
sweep over the edges; removed (-inf) nodes."""

import networkx as nx
import numpy as np
import pytest

from pardnn.graph import CostGraph
from pardnn.graph.levels import bottom_levels, critical_path_us, top_levels

NEG = float("-inf")


def random_dag(seed, n=40, p=0.12):
    rng = np.random.default_rng(seed)
    pairs = [(u, v) for u in range(n) for v in range(u + 1, n) if rng.random() < p]
    src, dst = zip(*pairs)
    g = CostGraph.build(names=[f"n{i}" for i in range(n)], comp_us=rng.uniform(0, 10, n),
                        edge_src=list(src), edge_dst=list(dst))
    return g, rng.uniform(0, 5, g.num_edges)


def oracle(g, ec):
    """tl and bl by networkx longest paths on a node-split graph."""
    d = nx.DiGraph()
    for v in range(g.num_nodes):
        d.add_edge(("in", v), ("out", v), weight=float(g.comp_us[v]))
    for e in range(g.num_edges):
        d.add_edge(("out", int(g.edge_src[e])), ("in", int(g.edge_dst[e])), weight=float(ec[e]))
    tl, bl = np.zeros(g.num_nodes), np.zeros(g.num_nodes)
    for v in range(g.num_nodes):
        anc = nx.ancestors(d, ("in", v))
        sub = d.subgraph(anc | {("in", v)})
        tl[v] = nx.dag_longest_path_length(sub) if anc else 0.0
        sub = d.subgraph(nx.descendants(d, ("in", v)) | {("in", v)})
        bl[v] = nx.dag_longest_path_length(sub)
    return tl, bl


@pytest.mark.parametrize("seed", range(4))
def test_levels_match_longest_paths(seed):
    g, ec = random_dag(seed)
    tl, bl = oracle(g, ec)
    assert np.allclose(top_levels(g, g.comp_us, ec), tl)
    assert np.allclose(bottom_levels(g, g.comp_us, ec), bl)
    assert critical_path_us(g, edge_cost=ec) == pytest.approx(bl.max())
    assert critical_path_us(g) == pytest.approx(bottom_levels(g, g.comp_us).max())


def test_removed_nodes_cut_every_path_through_them():
    # a -> b -> c and a -> c; removing b leaves only a -> c
    g = CostGraph.build(names=["a", "b", "c"], comp_us=[1, 5, 2],
                        edge_src=["a", "b", "a"], edge_dst=["b", "c", "c"])
    ec = np.ones(g.num_edges)
    cost = np.array([1, -np.inf, 2])
    assert top_levels(g, cost, ec).tolist() == [0.0, -np.inf, 2.0]
    assert bottom_levels(g, cost, ec).tolist() == [4.0, -np.inf, 2.0]
    assert top_levels(g, g.comp_us, ec).tolist() == [0.0, 2.0, 8.0]


def levels_by_definition(g, w, ec):
    """tl and bl straight from the module docstring, one edge at a time: tl(v) is the
    costliest tl(u) + w(u) + comm(u, v) over v's predecessors (0 for a source), bl(u)
    is w(u) plus the costliest comm(u, v) + bl(v) over its successors (0 for a sink);
    a node costing -inf is removed (-inf levels, invisible to its neighbours)."""
    n = g.num_nodes
    tl, bl = [0.0] * n, [NEG] * n
    for e in range(g.num_edges):                 # edge ids follow the source's order
        u, v = int(g.edge_src[e]), int(g.edge_dst[e])
        if w[u] != NEG:
            tl[v] = max(tl[v], tl[u] + w[u] + ec[e])
    for u in reversed(range(n)):
        if w[u] != NEG:
            succ = [ec[e] + bl[int(g.edge_dst[e])] for e in range(g.num_edges) if g.edge_src[e] == u]
            bl[u] = max([0.0, *succ]) + w[u]
    return [NEG if w[v] == NEG else tl[v] for v in range(n)], bl



@pytest.mark.parametrize("seed", range(60))
def test_compiled_sweeps_match_the_definition_to_the_bit(seed):
    """Random DAGs with ties (small integer costs, zero-cost nodes and edges), control
    edges, colocation groups, and removed nodes."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 40))
    pairs = [(u, v) for u in range(n) for v in range(u + 1, n) if rng.random() < 0.15]
    g = CostGraph.build(names=[f"n{i}" for i in range(n)], comp_us=rng.integers(0, 4, n).astype(float),
                        group=rng.integers(0, n, n), edge_src=[u for u, _ in pairs],
                        edge_dst=[v for _, v in pairs], edge_slot=rng.integers(-1, 2, len(pairs)))
    w = g.comp_us.astype(float).copy()
    if seed % 3 == 0:
        w[rng.random(n) < 0.2] = NEG
    ec = rng.integers(0, 3, g.num_edges).astype(float) * rng.choice([1.0, 0.1], g.num_edges)
    tl, bl = levels_by_definition(g, w.tolist(), ec.tolist())
    assert top_levels(g, w, ec).tolist() == tl
    assert bottom_levels(g, w, ec).tolist() == bl

"""Top and bottom levels against a networkx oracle, and removed (-inf) nodes."""

import networkx as nx
import numpy as np
import pytest

from pardnn.graph import CostGraph
from pardnn.graph.levels import bottom_levels, critical_path_us, top_levels


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

import json

import numpy as np
import pytest

from pardnn.errors import GraphError
from pardnn.graph import NORMAL, REFERENCE, RESIDUAL, CostGraph


def diamond(**kw):
    return CostGraph.build(
        names=["d", "b", "c", "a"], ops=["Add", "MatMul", "Relu", "Const"],
        comp_us=[4, 2, 3, 1], out_bytes=[8, 16, 16, 32], persist_bytes=[0, 0, 0, 64],
        kind=[NORMAL, NORMAL, REFERENCE, RESIDUAL], group=["x", "y", "x", "z"],
        pinned=["", "CPU", "", ""],
        edge_src=["a", "a", "b", "c"], edge_dst=["b", "c", "d", "d"],
        edge_bytes=[32, 32, 16, 16], edge_slot=[0, 0, 0, 0], **kw)


def test_nodes_are_renumbered_topologically_and_attributes_follow():
    g = diamond()
    assert g.names == ("a", "b", "c", "d")
    assert g.comp_us.tolist() == [1, 2, 3, 4]
    assert g.kind.tolist() == [RESIDUAL, NORMAL, REFERENCE, NORMAL]
    assert g.pinned == ("", "CPU", "", "")
    assert np.all(g.edge_src < g.edge_dst)


def test_csr_both_ways():
    g = diamond()
    assert sorted(g.successors(0).tolist()) == [1, 2]
    assert sorted(g.predecessors(3).tolist()) == [1, 2]
    for v in range(g.num_nodes):
        for p in range(g.pred_ptr[v], g.pred_ptr[v + 1]):
            e = g.pred_eid[p]
            assert g.edge_dst[e] == v and g.edge_src[e] == g.pred_src[p]


def test_groups_are_relabelled_and_listed():
    g = diamond()
    assert g.group[1] != g.group[0]
    assert g.group[2] == g.group[3]           # "x": c and d
    assert g.num_groups == 3
    members = sorted(g.group_members(g.group[3]).tolist())
    assert members == [2, 3]


def test_duplicate_edges_merge_but_slots_stay_distinct():
    g = CostGraph.build(names=["a", "b"], edge_src=[0, 0, 0], edge_dst=[1, 1, 1],
                        edge_bytes=[4, 8, 100], edge_slot=[0, 0, 1])
    assert g.num_edges == 2
    assert sorted(g.edge_bytes.tolist()) == [8, 100]


@pytest.mark.parametrize("kwargs, message", [
    (dict(names=["a", "a"]), "duplicate node name"),
    (dict(names=["a", "b"], edge_src=["a"], edge_dst=["zz"]), "dangling edge"),
    (dict(names=["a", "b"], edge_src=[0], edge_dst=[5]), "dangling edge"),
    (dict(names=["a", "b"], comp_us=[1, -2]), "negative compute time"),
    (dict(names=["a", "b"], edge_src=[0], edge_dst=[1], edge_bytes=[-1]), "negative edge bytes"),
    (dict(names=["a", "b", "c"], edge_src=[0, 1, 2], edge_dst=[1, 2, 1]), "cycle"),
    (dict(names=["a"], edge_src=[0], edge_dst=[0]), "self-loop"),
])
def test_validation_errors(kwargs, message):
    with pytest.raises(GraphError, match=message):
        CostGraph.build(**kwargs)


def test_json_round_trip(tmp_path):
    g = diamond()
    path = tmp_path / "g.json"
    g.to_json(path)
    doc = json.loads(path.read_text())
    assert doc["format"] == "pardnn-costgraph" and doc["version"] == 1
    h = CostGraph.from_json(path)
    assert h.names == g.names and h.ops == g.ops and h.pinned == g.pinned
    for attr in ("comp_us", "out_bytes", "persist_bytes", "kind", "group",
                 "edge_src", "edge_dst", "edge_bytes", "edge_slot"):
        assert np.array_equal(getattr(h, attr), getattr(g, attr)), attr


def test_json_errors_name_the_file(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(GraphError, match="bad.json: not valid JSON"):
        CostGraph.from_json(bad)
    bad.write_text(json.dumps({"format": "pardnn-costgraph", "version": 99, "nodes": [], "edges": []}))
    with pytest.raises(GraphError, match="version 99"):
        CostGraph.from_json(bad)
    with pytest.raises(GraphError, match="cannot read"):
        CostGraph.from_json(tmp_path / "missing.json")


@pytest.mark.parametrize("seed", range(5))
def test_numbering_is_networkx_lexicographic_topological_order(seed):
    # Kahn's algorithm taking the smallest input index first: the order networkx's
    # lexicographical_topological_sort gives on the input graph keyed by index.
    import networkx as nx
    rng = np.random.default_rng(seed)
    n = 30
    perm = rng.permutation(n)                     # input position of each DAG rank
    pairs = [(perm[u], perm[v]) for u in range(n) for v in range(u + 1, n) if rng.random() < 0.15]
    g = CostGraph.build(names=[f"n{i}" for i in range(n)],
                        edge_src=[int(a) for a, _ in pairs], edge_dst=[int(b) for _, b in pairs])
    inputs = nx.DiGraph()
    inputs.add_nodes_from(range(n))
    inputs.add_edges_from(pairs)
    want = [f"n{i}" for i in nx.lexicographical_topological_sort(inputs, key=int)]
    assert list(g.names) == want
    exported = g.to_networkx()
    assert nx.is_directed_acyclic_graph(exported)
    assert all(u < v for u, v in exported.edges)
    assert {(g.names[u], g.names[v]) for u, v in exported.edges} == {(f"n{a}", f"n{b}") for a, b in pairs}


def test_networkx_export_carries_costs_placement_and_summed_bytes():
    g = CostGraph.build(names=["a", "b"], comp_us=[1, 2], out_bytes=[24, 0],
                        edge_src=["a", "a"], edge_dst=["b", "b"], edge_bytes=[8, 16],
                        edge_slot=[0, 1])
    d = g.to_networkx(device=[0, 1])
    assert d.nodes[1] == {"name": "b", "op": "", "comp_us": 2.0, "out_bytes": 0,
                          "group": 1, "device": 1}
    assert list(d.edges(data=True)) == [(0, 1, {"bytes": 24})]

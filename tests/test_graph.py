import json
import re

import numpy as np
import pytest

from pardnn.base.errors import GraphError
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


OPTIONAL_NODE_FIELDS = ("op", "comp_us", "out_bytes", "persist_bytes", "temp_bytes", "kind", "group",
                        "pinned")


def _doc(nodes, edges):
    return {"format": "pardnn-costgraph", "version": 1, "nodes": nodes, "edges": edges}


def test_json_null_means_absent_for_every_optional_field():
    names = [f"n{i}" for i in range(4)]
    absent = CostGraph.from_dict(_doc([{"name": x} for x in names],
                                      [{"src": "n0", "dst": "n1"}, {"src": "n1", "dst": "n2"}]))
    nulls = CostGraph.from_dict(_doc(
        [{"name": x, **{key: None for key in OPTIONAL_NODE_FIELDS}} for x in names],
        [{"src": "n0", "dst": "n1", "bytes": None, "slot": None},
         {"src": "n1", "dst": "n2", "bytes": None, "slot": None}]))
    assert nulls.to_dict() == absent.to_dict()
    assert nulls.num_groups == 4                       # not one group of all "null" nodes
    assert nulls.ops == ("", "", "", "") and nulls.pinned == ("", "", "", "")
    assert nulls.edge_slot.tolist() == [0, 0] and nulls.edge_bytes.tolist() == [0, 0]


@pytest.mark.parametrize("node, edge", [({"name": None}, {"src": "a", "dst": "b"}),
                                        ({"name": "a"}, {"src": None, "dst": "b"})])
def test_json_null_in_a_required_field_is_malformed(node, edge):
    with pytest.raises(GraphError, match="malformed cost graph"):
        CostGraph.from_dict(_doc([node, {"name": "b"}], [edge]))


def test_one_group_holding_most_nodes_is_warned_about(tmp_path, capsys):
    from pardnn.cli import main
    nodes = [{"name": f"n{i}", "comp_us": 1, "group": "g" if i < 3 else None} for i in range(5)]
    path = tmp_path / "g.json"
    path.write_text(json.dumps(_doc(nodes, [])))
    assert main(["place", str(path), "--devices", "cpu:2", "-o", str(tmp_path / "out")]) == 0
    assert capsys.readouterr().err == (f"pardnn: warning: {path}: one colocation group (with node 'n0') "
                                       f"holds 3 of 5 nodes; they all must share one device\n")
    nodes[2]["group"] = None                            # 2 of 5: no warning
    path.write_text(json.dumps(_doc(nodes, [])))
    assert main(["place", str(path), "--devices", "cpu:2", "-o", str(tmp_path / "out")]) == 0
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("field, value, message", [
    ("out_bytes", 1e30, "output bytes too large"), ("persist_bytes", 2.0**61, "persistent bytes too large"),
    ("comp_us", 1e300, "compute time too large")])
def test_absurd_costs_are_refused_not_wrapped(field, value, message):
    doc = _doc([{"name": "a"}, {"name": "b", field: value}], [])
    with pytest.raises(GraphError, match=message):
        CostGraph.from_dict(doc)



def test_bytes_that_would_overflow_int64_sums_together_are_refused():
    """Each value is within 1 EiB, but 16 of them pass int64 when summed: the peaks
    came out negative and 'fits' before this was refused."""
    with pytest.raises(GraphError, match="bytes add up to .* more than .* sums of them would overflow"):
        CostGraph.build([f"v{i}" for i in range(16)], persist_bytes=[2**60] * 16, kind=[RESIDUAL] * 16)
    CostGraph.build(["a", "b"], persist_bytes=[2**60, 2**60], kind=[RESIDUAL] * 2)      # 2 EiB: fine


@pytest.mark.parametrize("names, ops, message", [
    (["a", "\ud800x"], None, "node name '\\ud800x' is not valid Unicode text"),
    (["a", "b"], ["MatMul", "\udc00"], "op '\\udc00' is not valid Unicode text"),
])
def test_names_no_file_can_hold_are_refused(names, ops, message):
    with pytest.raises(GraphError, match=re.escape(message)):
        CostGraph.build(names, ops=ops)

@pytest.mark.parametrize("seed", range(4))
def test_integer_group_labels_number_groups_as_any_labels_do(seed):
    # integer labels are numbered by sorting, others through a dict: the same numbers
    rng = np.random.default_rng(seed)
    labels = [int(x) for x in rng.integers(-3, [12, 10**15][seed % 2], 50)]
    by_int = CostGraph.build(names=[f"n{i}" for i in range(50)], group=labels)
    by_str = CostGraph.build(names=[f"n{i}" for i in range(50)], group=[str(x) for x in labels])
    for attr in ("group", "group_ptr", "group_nodes"):
        assert np.array_equal(getattr(by_int, attr), getattr(by_str, attr)), attr


@pytest.mark.parametrize("where, field, value, message", [
    ("nodes", "comp_us", "5", "nodes[1].comp_us must be a number, not '5'"),
    ("nodes", "out_bytes", 1.5, "nodes[1].out_bytes must be a whole number, not 1.5"),
    ("edges", "slot", 1.5, "edges[0].slot must be a whole number, not 1.5"),
    ("edges", "slot", "3", "edges[0].slot must be a number, not '3'"),
    ("edges", "bytes", True, "edges[0].bytes must be a number, not True"),
    ("nodes", "group", True, "nodes[1].group must be a string or an integer, not True"),
])
def test_json_values_of_the_wrong_type_are_refused_not_converted(tmp_path, where, field, value, message):
    doc = _doc([{"name": "a", "group": 1}, {"name": "b"}], [{"src": "a", "dst": "b"}])
    doc[where][1 if where == "nodes" else 0][field] = value
    with pytest.raises(GraphError, match=re.escape(message)):
        CostGraph.from_dict(doc)
    path = tmp_path / "g.json"                   # the file reader (in batches) says the same
    path.write_text(json.dumps(doc))
    with pytest.raises(GraphError, match=re.escape(message)):
        CostGraph.from_json(str(path))
    doc[where][1 if where == "nodes" else 0][field] = 1e6 if field != "group" else "g"      # whole: fine
    CostGraph.from_dict(doc)


def test_numpy_numbers_in_a_document_are_numbers():
    doc = _doc([{"name": "a", "comp_us": np.float32(3.5), "out_bytes": np.int64(8)}, {"name": "b"}],
               [{"src": "a", "dst": "b", "bytes": np.int32(8), "slot": np.int64(0)}])
    g = CostGraph.from_dict(doc)
    assert g.comp_us.tolist() == [3.5, 0.0] and g.edge_bytes.tolist() == [8]


@pytest.mark.parametrize("kwargs, message", [
    ({"comp_us": ["5", 1.0]}, "compute time must be numbers, not np.str_('5')"),
    ({"out_bytes": [1.5, 7]}, "output bytes must be whole numbers, not np.float64(1.5) at entry 0"),
    ({"edge_bytes": [True]}, "edge bytes must be numbers"),
    ({"edge_slot": [1.9]}, "edge slot must be whole numbers"),
    ({"comp_us": [True, 1]}, "compute time must be numbers, not booleans"),
    ({"out_bytes": [10**400, 1]}, "output bytes too large (beyond a float)"),
])
def test_the_python_api_refuses_values_numpy_would_convert(kwargs, message):
    args = {"names": ["a", "b"], "edge_src": ["a"], "edge_dst": ["b"], **kwargs}
    with pytest.raises(GraphError, match=re.escape(message)):
        CostGraph.build(**args)


def test_decimals_are_numbers_and_huge_json_integers_too_large(tmp_path):
    import decimal
    assert CostGraph.build(["a"], comp_us=[decimal.Decimal("1.5")]).comp_us.tolist() == [1.5]
    path = tmp_path / "g.json"
    path.write_text(json.dumps(_doc([{"name": "a", "comp_us": 10**400}], [])))
    with pytest.raises(GraphError, match=re.escape("nodes[0].comp_us too large (100000000000...)")):
        CostGraph.from_json(str(path))

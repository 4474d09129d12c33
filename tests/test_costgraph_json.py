"""Reading a cost-graph JSON file in batches gives the graph, or the error message,
that parsing the whole file and `CostGraph.from_dict` give."""

import json

import numpy as np
import pytest

from pardnn.base import jsonfile
from pardnn.base.errors import GraphError
from pardnn.graph import CostGraph
from pardnn.graph.costgraph_json import NotStreamable, columns_from_file
from pardnn.base.jsonfile import read_json

FIELDS = list(CostGraph.__dataclass_fields__)


@pytest.fixture(autouse=True)
def small_chunks(monkeypatch):
    """A few hundred characters a chunk, so that every file is read in many batches."""
    monkeypatch.setattr(jsonfile, "_CHUNK", 300)


def whole(path):
    """The graph or the error message of the whole-file reader."""
    try:
        return CostGraph.from_dict(read_json(path, GraphError), source=str(path))
    except GraphError as exc:
        return str(exc)


def batched(path):
    try:
        return CostGraph.from_json(path)
    except GraphError as exc:
        return str(exc)


def assert_same(a, b):
    assert type(a) is type(b)
    if isinstance(a, str):
        assert a == b
        return
    for field in FIELDS:
        x, y = getattr(a, field), getattr(b, field)
        if isinstance(x, np.ndarray):
            assert x.dtype == y.dtype and np.array_equal(x, y), field
        else:
            assert x == y, field


NAMES = ["a", "b}", "c\"}, {", "d]", "é\u00e9", "f\\\\}", "g\n}", "h"]


def random_doc(rng, n=40, random_ends=0.03):
    """Nodes with any of the optional fields absent, null or set, odd names, and
    edges from lower to higher or random positions (cycles are possible)."""
    nodes = []
    for i in range(n):
        node = {"name": f"{NAMES[i % len(NAMES)]}{i}"}
        for key, value in (("op", f"Op{i % 3}"), ("comp_us", float(rng.random() * 10)),
                           ("out_bytes", int(rng.integers(0, 1 << 40))), ("persist_bytes", i),
                           ("temp_bytes", 7), ("kind", ["normal", "residual", "reference"][i % 3]),
                           ("group", [i, f"g{i % 5}", i % 4][i % 3]), ("pinned", ["CPU", ""][i % 2])):
            roll = rng.random()
            if roll < 0.6:
                node[key] = value
            elif roll < 0.8:
                node[key] = None
        nodes.append(node)
    edges = []
    for _ in range(2 * n):
        u, v = rng.integers(0, n, 2) if rng.random() < random_ends else sorted(rng.integers(0, n, 2))
        if u != v:
            edge = {"src": nodes[u]["name"], "dst": nodes[v]["name"]}
            if rng.random() < 0.7:
                edge["bytes"] = int(rng.integers(0, 1000))
            if rng.random() < 0.7:
                edge["slot"] = int(rng.integers(-1, 3))
            edges.append(edge)
    order = rng.permutation(len(nodes))
    return {"format": "pardnn-costgraph", "version": 1,
            "nodes": [nodes[i] for i in order], "edges": edges}


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("indent", [None, 1])
def test_random_files_read_in_batches_give_the_same_graph(tmp_path, seed, indent):
    doc = random_doc(np.random.default_rng(seed))
    path = tmp_path / "g.json"
    path.write_text(json.dumps(doc, indent=indent))
    columns_from_file(path)                         # read in batches, not whole
    assert_same(batched(path), whole(path))


def test_a_written_graph_is_read_in_batches(tmp_path):
    g = CostGraph.from_dict(random_doc(np.random.default_rng(0), random_ends=0))
    g.to_json(tmp_path / "g.json")
    columns_from_file(tmp_path / "g.json")
    assert_same(CostGraph.from_json(tmp_path / "g.json"), g)


def node(name, **fields):
    return {"name": name, **fields}


def doc_text(nodes, edges, **extra):
    return json.dumps({"format": "pardnn-costgraph", "version": 1, **extra, "nodes": nodes, "edges": edges})


GOOD = doc_text([node("a"), node("b")], [{"src": "a", "dst": "b"}])

ODD_FILES = {
    "not JSON": "{not json",
    "truncated": GOOD[:-30],
    "extra data": GOOD + " 5",
    "a trailing comma": GOOD.replace('"dst": "b"}]', '"dst": "b"},]'),
    "a BOM": "\ufeff" + GOOD,
    "nodes repeated": GOOD[:-1] + ', "nodes": [{"name": "z"}]}',
    "edges before nodes": json.dumps({"format": "pardnn-costgraph", "version": 1, "edges": [{"src": "a", "dst": "b"}],
                                      "nodes": [node("a"), node("b")]}),
    "no edges": json.dumps({"format": "pardnn-costgraph", "version": 1, "nodes": [node("a")]}),
    "empty": doc_text([], []),
    "version 2": GOOD.replace('"version": 1', '"version": 2'),
    "version 1.0": GOOD.replace('"version": 1', '"version": 1.0'),
    "another format": GOOD.replace("pardnn-costgraph", "other"),
    "a list": "[1, 2]",
    "nodes an object": doc_text({}, []),
    "a node a string": doc_text(["a"], []),
    "a number for a name": doc_text([node(5)], []),
    "a null name": doc_text([node(None), node("b")], []),
    "a number for a pin": doc_text([node("a", pinned=3)], []),
    "a number for an op": doc_text([node("a", op=3)], []),
    "a src on a node": doc_text([node("a", src=3)], []),
    "a name on an edge": doc_text([node("a"), node("b")], [{"src": "a", "dst": "b", "name": 1}]),
    "a duplicate name": doc_text([node("a"), node("a")], []),
    "a dangling edge": doc_text([node("a")], [{"src": "a", "dst": "x"}]),
    "a self-loop": doc_text([node("a")], [{"src": "a", "dst": "a"}]),
    "a cycle": doc_text([node("a"), node("b")], [{"src": "a", "dst": "b"}, {"src": "b", "dst": "a"}]),
    "an unknown kind": doc_text([node("a", kind="odd")], []),
    "a string cost": doc_text([node("a", comp_us="5")], []),
    "a boolean cost": doc_text([node("a", out_bytes=True)], []),
    "a negative cost": doc_text([node("a", comp_us=-1)], []),
    "a NaN cost": doc_text([node("a"), node("b", comp_us=float("nan"))], []),
    "an infinite cost": doc_text([node("a", comp_us=float("inf"))], []),
    "an absurd cost": doc_text([node("a", out_bytes=10**30)], []),
    "a slot beyond 64 bits": doc_text([node("a"), node("b")], [{"src": "a", "dst": "b", "slot": 2**64}]),
    "a slot beyond 32 bits": doc_text([node("a"), node("b")], [{"src": "a", "dst": "b", "slot": 2**33}]),
    "a slot below -1": doc_text([node("a"), node("b")], [{"src": "a", "dst": "b", "slot": -5}]),
    "a float slot": doc_text([node("a"), node("b")], [{"src": "a", "dst": "b", "slot": 1.5}]),
    "groups beyond 64 bits": doc_text([node(f"n{i}", group=2**64 + i) for i in range(20)], []),
    "a list group": doc_text([node("a", group=[1])], []),
    "an object group": doc_text([node("a", group={"x": {"y": 1}}), node("b", group={"x": {"y": 1}})], []),
    "a lone surrogate": doc_text([node("a\ud800")], []),
    "an edge not an object": doc_text([node("a")], ["a"]),
}


@pytest.mark.parametrize("name", list(ODD_FILES))
def test_odd_files_give_the_whole_file_readers_graph_or_message(tmp_path, name):
    path = tmp_path / "g.json"
    path.write_text(ODD_FILES[name], encoding="utf-8", errors="surrogatepass")
    assert_same(batched(path), whole(path))


def test_integers_beyond_64_bits_are_read_whole(tmp_path):
    # orjson reads them as floats: 2**64 and 2**64 + 1 would be one group
    path = tmp_path / "g.json"
    path.write_text(ODD_FILES["groups beyond 64 bits"])
    with pytest.raises(NotStreamable):
        columns_from_file(path)
    assert CostGraph.from_json(path).num_groups == 20


def test_a_missing_file_is_one_line(tmp_path):
    with pytest.raises(GraphError, match="missing.json: cannot read"):
        CostGraph.from_json(tmp_path / "missing.json")


FULL_NODE = {"name": "a", "op": "MatMul", "comp_us": 1.0, "out_bytes": 8, "persist_bytes": 0, "temp_bytes": 0,
             "kind": "normal", "group": 0, "pinned": None}


@pytest.mark.parametrize("nodes, edges, message", [
    ([node("a", out_bytes=1.5), node("b")], [], "nodes[0].out_bytes must be a whole number, not 1.5"),
    ([node("a"), node("b", persist_bytes=2.5)], [], "nodes[1].persist_bytes must be a whole number, not 2.5"),
    ([node("a"), node("b", temp_bytes=0.5)], [], "nodes[1].temp_bytes must be a whole number, not 0.5"),
    ([node("a"), node("b")], [{"src": "a", "dst": "b", "bytes": 4.5}], "edges[0].bytes must be a whole number, not 4.5"),
    ([node("a"), node("b")], [{"src": "a", "dst": "b", "slot": 0.5}], "edges[0].slot must be a whole number, not 0.5"),
    ([node("a", out_bytes=12345678901234567890 * 10**400)], [], "nodes[0].out_bytes too large (123456789012...)"),
    ([node("a"), node("b", group=True)], [], "nodes[1].group must be a string or an integer, not True"),
    ([node("a"), node(5)], [], "nodes[1].name must be a string, not 5"),
    ([node("a"), node("b", pinned=3)], [], "nodes[1].pinned must be a string, not 3"),
    ([node("a"), node("b")], [{"src": "a", "dst": 7}], "edges[0].dst must be a string, not 7"),
    ([node("a", comp_us="5")], [], "nodes[0].comp_us must be a number, not '5'"),
    ([node("a"), node("b", out_bytes=True)], [], "nodes[1].out_bytes must be a number, not True"),
    # every key of a node but one, and one that is not a node's: as many keys as usual
    ([{**{k: v for k, v in FULL_NODE.items() if k != "pinned"}, "src": 3}], [], "nodes[0].src must be a string, not 3"),
    # every key of a node, and one more on one of them
    ([FULL_NODE, {**FULL_NODE, "name": "b", "src": 3}], [], "nodes[1].src must be a string, not 3"),
])
def test_what_is_wrong_is_named_by_its_entry(tmp_path, nodes, edges, message):
    """Both readers name the entry and the field at fault, in the whole reader's words."""
    path = tmp_path / "g.json"
    path.write_text(doc_text(nodes, edges))
    with pytest.raises(GraphError) as exc:
        CostGraph.from_json(path)
    assert str(exc.value) == f"{path}: {message}"
    assert whole(path) == f"{path}: {message}"


@pytest.mark.parametrize("nodes, edges", [
    ([node("a", comp_us=1), node("b", comp_us=2.5)], [{"src": "a", "dst": "b", "slot": -1}]),   # ints and floats
    ([node("a", out_bytes=8.0), node("b")], [{"src": "a", "dst": "b", "bytes": 16.0, "slot": 2**31 - 1}]),
])
def test_the_usual_layout_is_read_in_batches(tmp_path, nodes, edges):
    """Control edges, the largest slot, whole bytes written as floats and cost columns
    mixing ints and floats are what tools write: the batch reader takes them itself
    (a million-node file never becomes a million dicts)."""
    path = tmp_path / "g.json"
    path.write_text(doc_text(nodes, edges))
    columns = columns_from_file(path)
    assert_same(CostGraph.build(**columns), whole(path))


@pytest.mark.parametrize("nodes, edges", [
    ([node("a", out_bytes=1.5)], []),
    ([node("a"), node("b")], [{"src": "a", "dst": "b", "bytes": 4.5}]),
    ([{**{k: v for k, v in FULL_NODE.items() if k != "pinned"}, "src": 3}], []),
])
def test_what_the_batch_reader_is_not_sure_of_goes_to_the_whole_reader(tmp_path, nodes, edges):
    path = tmp_path / "g.json"
    path.write_text(doc_text(nodes, edges))
    with pytest.raises(NotStreamable):
        columns_from_file(path)

"""Recomputed ops written into TF graphs (pardnn.tf.recompute, recompute.csv of
pardnn.io.placement) on hand-made graphs whose answer is known, and which ops may be
recomputed at all by their OpDefs."""

import pytest

from pardnn.base.errors import UserError
from pardnn.graph import CostGraph
from pardnn.graph.recompute import recompute_rows
from pardnn.io.placement import read_recompute_csv, write_recompute_csv
from pardnn.tf.protos import GraphDef
from pardnn.tf.recompute import MARK, add_copies, check_recomputable, mapped_input, rewiring

C = "pardnn_recompute/"


def graph_def():
    """x -> a (Relu) -> s (Unique: two outputs); b (Relu of x); the backward pass:
    gradients/t (the trigger) and gradients/g reading s:0, s:1, a and b."""
    out = GraphDef()
    for name, op, inputs in [("x", "Placeholder", []), ("a", "Relu", ["x"]), ("s", "Unique", ["a"]),
                             ("b", "Relu", ["x"]), ("gradients/t", "Identity", ["x"]),
                             ("gradients/g", "AddN", ["s", "s:1", "a", "b", "^gradients/t"])]:
        node = out.node.add(name=name, op=op)
        node.input.extend(inputs)
        node.attr["T"].type = 1
    return out


def cost_graph():
    """graph_def() with a, s and b recomputed for gradients/g: the copy of a waits for
    the trigger, the copy of s reads the copy of a, the copy of b waits for nothing."""
    names = ["x", "a", "s", "b", "gradients/t", "gradients/g", C + "a", C + "s", C + "b"]
    edges = [("x", "a", 0), ("a", "s", 0), ("x", "b", 0), ("x", "gradients/t", 0),
             (C + "s", "gradients/g", 0), (C + "s", "gradients/g", 1), (C + "a", "gradients/g", 0),
             (C + "b", "gradients/g", 0), ("gradients/t", "gradients/g", -1),
             ("x", C + "a", 0), (C + "a", C + "s", 0), ("x", C + "b", 0), ("gradients/t", C + "a", -1)]
    src, dst, slot = zip(*edges)
    return CostGraph.build(names=names, edge_src=list(src), edge_dst=list(dst), edge_slot=list(slot),
                           edge_bytes=[4 if k >= 0 else 0 for k in slot])


def test_copies_are_their_originals_renamed_with_inputs_mapped_and_readers_rewired():
    out = graph_def()
    add_copies(out, rewiring(recompute_rows(cost_graph())))
    nodes = {n.name: n for n in out.node}
    assert [n.name for n in out.node][:6] == ["x", "a", "s", "b", "gradients/t", "gradients/g"]
    assert list(nodes[C + "a"].input) == ["x", "^gradients/t"]
    assert list(nodes[C + "s"].input) == [C + "a"]
    assert list(nodes[C + "b"].input) == ["x", "^b"]          # a twin otherwise: Grappler would merge it
    assert list(nodes["gradients/g"].input) == [C + "s", C + "s:1", C + "a", C + "b", "^gradients/t"]
    for copy in (C + "a", C + "s", C + "b"):
        original = nodes[copy[len(C):]]
        assert nodes[copy].op == original.op and nodes[copy].attr["T"] == original.attr["T"]
        assert nodes[copy].attr[MARK].s.decode() == original.name
    assert list(nodes["a"].input) == ["x"] and list(nodes["s"].input) == ["a"]        # originals untouched


def test_no_copies_no_rows():
    graph = CostGraph.build(names=["x", "a"], edge_src=["x"], edge_dst=["a"])
    assert recompute_rows(graph) == []
    out = graph_def()
    before = out.SerializeToString()
    add_copies(out, rewiring([]))
    assert out.SerializeToString() == before


def test_a_copy_or_reader_missing_from_the_graph_is_a_user_error():
    out = graph_def()
    with pytest.raises(UserError, match="recomputed op 'nope' is not in the graph"):
        add_copies(out, rewiring([("x", 0, C + "nope")]))
    with pytest.raises(UserError, match="op 'gradients/h', which reads a recomputed op, is not in the graph"):
        add_copies(graph_def(), rewiring([(C + "a", 0, "gradients/h")]))


@pytest.mark.parametrize("text, want", [("a", C + "a"), ("a:0", C + "a:0"), ("s:1", C + "s:1"),
                                        ("^a", "^a"), ("x", "x"), ("s:2", "s:2")])
def test_mapped_input_keeps_the_texts_form(text, want):
    assert mapped_input(text, {("a", 0): C + "a", ("s", 1): C + "s"}) == want


def test_recompute_csv_round_trip_and_bad_rows(tmp_path):
    graph = cost_graph()
    path = tmp_path / "recompute.csv"
    write_recompute_csv(recompute_rows(graph), path)
    assert path.read_text().splitlines()[0] == "producer,slot,consumer"
    assert read_recompute_csv(path) == recompute_rows(graph)
    assert read_recompute_csv(tmp_path / "none.csv") == []
    for row in ("a,0", "a,x,b", "a,-2,b", ",0,b"):
        path.write_text(f"producer,slot,consumer\n{row}\n")
        with pytest.raises(UserError, match=r"recompute.csv:2: expected `producer,slot,consumer`"):
            read_recompute_csv(path)


def test_check_recomputable_names_the_op_and_why():
    check_recomputable(["a"], {"b": "RandomUniform is stateful"}, "graph.pb")
    with pytest.raises(UserError, match=r"^graph.pb: cannot recompute op 'b': RandomUniform is stateful$"):
        check_recomputable(["a", "b"], {"b": "RandomUniform is stateful"}, "graph.pb")


@pytest.mark.tf
def test_not_recomputable_by_op_defs():
    """Stateful (a seeded RandomUniform too), reads of a variable, loop bodies, sources;
    a stateless random op and plain math may be recomputed."""
    import pardnn.tf.quiet_import  # noqa: F401
    import tensorflow as tf
    from pardnn.tf.op_defs import from_tensorflow
    from pardnn.tf.recompute import not_recomputable
    tf1 = tf.compat.v1
    graph = tf.Graph()
    tf1.disable_control_flow_v2()                   # TF1's Enter/Merge/Switch/Exit loop
    try:
        build_graph_with_loop(graph)
    finally:
        tf1.enable_control_flow_v2()
    graph_def = graph.as_graph_def()
    why = not_recomputable(graph_def, from_tensorflow({n.op for n in graph_def.node}))
    assert why["noise/RandomUniform"] == "RandomUniform is stateful (a second run may give other values)"
    assert why["v/read"] == "Identity reads a variable" and why["mul"] == "Mul reads a variable"
    assert why["x"].endswith("has no data inputs")
    assert "runs inside a loop" in why["loop/add"] and "runs inside a loop" in why["loop/Less"]
    assert "loop/Exit" in why
    assert not {"y", "add", "add_1", "same", "same/StatelessRandomUniformV2", "Cast", "after"} & set(why)


def build_graph_with_loop(graph):
    import tensorflow as tf
    tf1 = tf.compat.v1
    with graph.as_default():
        x = tf1.placeholder(tf.float32, [4], name="x")
        v = tf1.Variable(tf.ones([4]), use_resource=False, name="v")
        noise = tf1.random_uniform([4], seed=1, name="noise")
        same = tf.random.stateless_uniform([4], seed=[1, 2], name="same")
        y = tf.nn.relu(x * v + noise + same, name="y")
        count = tf1.while_loop(lambda i: i < 3, lambda i: i + 1, [tf.cast(y[0], tf.int32)], name="loop")
        tf.identity(count * 2, name="after")


def read_graph(update_waits_for_read=True):
    """y = x W with W a variable h read by r; the backward pass: gradients/dw (x and
    the incoming gradient) feeds the update, gradients/dx (the incoming gradient and
    r) goes to the layers below and not to the update, which waits for r by a control
    edge (as TF2's automatic control dependencies make it) or not; h's initialiser."""
    names = ["h", "init", "x", "r", "f", "loss", "gradients/dw", "gradients/dx", "update"]
    ops = ["VarHandleOp", "AssignVariableOp", "Placeholder", "ReadVariableOp", "MatMul", "Sum", "MatMul",
           "MatMul", "ResourceApplyAdam"]
    edges = [("h", "init", 0), ("h", "r", 0), ("x", "f", 0), ("r", "f", 0), ("f", "loss", 0),
             ("loss", "gradients/dw", 0), ("x", "gradients/dw", 0), ("loss", "gradients/dx", 0),
             ("r", "gradients/dx", 0), ("h", "update", 0), ("gradients/dw", "update", 0)]
    edges += [("r", "update", -1)] if update_waits_for_read else []
    src, dst, slot = zip(*edges)
    return CostGraph.build(names=names, ops=ops, edge_src=list(src), edge_dst=list(dst), edge_slot=list(slot))


def test_a_variable_read_again_must_come_before_the_variables_update():
    """pardnn.graph.host_fetch's second read keeps the first's control edges: the
    update waits for it, so the backward pass gets the first read's value. A second
    read the update does not wait for is refused, naming the update."""
    from pardnn.graph.host_fetch import with_refetch
    from pardnn.tf.recompute import rereads
    graph = read_graph()
    readers = [name.startswith("gradients/") or name == "update" for name in graph.names]   # late readers
    refetched, _ = with_refetch(graph, [graph.index()["r"]], readers)
    assert rereads(refetched) == {"r": None}
    unguarded = read_graph(update_waits_for_read=False)
    unguarded, _ = with_refetch(unguarded, [unguarded.index()["r"]], readers)
    assert rereads(unguarded) == {"r": "ReadVariableOp is read again, but the variable's write 'update' does not "
                                        "wait for the second read"}
    assert rereads(graph) == {}

"""load_profile on small real TF graphs: an MLP trained with Adam, TF1 while loops."""

import numpy as np
import pytest

import pardnn.tf.quiet_import  # noqa: F401  (quiet TensorFlow import first)
import tensorflow as tf

from pardnn.graph import NORMAL, REFERENCE, RESIDUAL, CostGraph
from pardnn_builtin_models import load_module
from pardnn.tf import load_profile, profile, profile_model, session_config
from pardnn.tf import op_defs
from pardnn.tf.profile_loader import kernel_pins, node_kinds
from pardnn.tf.graphdef import graph_table
from pardnn.tf.op_defs import from_tensorflow

pytestmark = pytest.mark.tf
tf1 = tf.compat.v1
TINY = {"layers": 2, "hidden": 16, "inputs": 8, "classes": 4, "batch": 4}


@pytest.fixture(scope="module")
def mlp_profile(tmp_path_factory):
    model = load_module("mlp").build(**TINY)
    out = tmp_path_factory.mktemp("mlp") / "prof"
    profile_model(model, steps=3, devices="cpu:1", out_dir=str(out), meta={"model": "mlp", "knobs": TINY})
    graph, info = load_profile(str(out))
    return graph, info, graph.index(), model


def _out_edges(graph, node):
    e = np.arange(graph.succ_ptr[node], graph.succ_ptr[node + 1])
    return graph.edge_dst[e], graph.edge_bytes[e], graph.edge_slot[e]


def test_variables_and_adam_slots_are_residual_with_shape_bytes(mlp_profile):
    graph, _, ix, _ = mlp_profile
    for name, shape in [("layer0/w", (8, 16)), ("layer1/b", (16,)), ("logits/w", (16, 4))]:
        for var in (name, f"{name}/Adam", f"{name}/Adam_1"):
            assert graph.kind[ix[var]] == RESIDUAL, var
            assert graph.persist_bytes[ix[var]] == 4 * np.prod(shape), var
    assert graph.kind[ix["beta1_power"]] == RESIDUAL and graph.persist_bytes[ix["beta1_power"]] == 4
    assert graph.persist_bytes[graph.kind != RESIDUAL].sum() == 0


def test_variable_readers_and_updaters_share_its_group(mlp_profile):
    graph, _, ix, _ = mlp_profile
    group = graph.group[ix["layer0/w"]]
    members = {graph.names[i] for i in graph.group_members(group)}
    assert {"layer0/w/Adam", "layer0/w/Adam_1", "layer0/MatMul/ReadVariableOp",
            "train/update_layer0/w/ResourceApplyAdam"} <= members
    assert graph.group[ix["layer1/w"]] != group            # another variable, another group
    assert "layer0/MatMul" not in members                  # reads a value, not the handle


def test_kinds_of_updaters_and_readers(mlp_profile):
    graph, _, ix, _ = mlp_profile
    apply = ix["train/update_layer0/w/ResourceApplyAdam"]
    assert graph.kind[apply] == REFERENCE and graph.out_bytes[apply] == 0
    assert graph.kind[ix["layer0/w/Assign"]] == REFERENCE
    read = ix["layer0/MatMul/ReadVariableOp"]             # aliases the variable's buffer
    assert graph.kind[read] == REFERENCE and graph.out_bytes[read] == 0
    assert set(_out_edges(graph, read)[1].tolist()) == {graph.persist_bytes[ix["layer0/w"]]}
    assert graph.kind[ix["layer0/MatMul"]] == NORMAL


def test_reads_of_a_gathered_variable_copy_and_other_reads_alias():
    with tf.Graph().as_default() as g:
        table_var = tf1.get_variable("table", [10, 4], use_resource=True)
        dense = tf1.get_variable("dense", [4, 4], use_resource=True)
        rows = tf.nn.embedding_lookup(table_var, [1, 2])        # ResourceGather: copy-on-read
        tf.matmul(rows + tf.reduce_sum(table_var.read_value()), dense.read_value(), name="out")
    graph_def = g.as_graph_def()
    table = graph_table(graph_def, from_tensorflow({n.op for n in graph_def.node}))
    kind = dict(zip(table.names, node_kinds(table)[0].tolist()))
    reads = [op for op in g.get_operations() if op.type == "ReadVariableOp"]
    of = {var: {kind[op.name] for op in reads if op.inputs[0].op.name == var} for var in ("table", "dense")}
    assert of == {"table": {NORMAL}, "dense": {REFERENCE}}
    assert sum(op.inputs[0].op.name == "table" for op in reads) == 2


def test_edges_carry_the_bytes_of_the_slot_they_read(mlp_profile):
    graph, _, ix, _ = mlp_profile
    dst, nbytes, slot = _out_edges(graph, ix["layer0/MatMul"])
    assert list(slot) == [0] and list(nbytes) == [4 * 16 * 4]          # batch x hidden floats
    xent = ix["softmax_cross_entropy_with_logits"]                      # outputs: loss [4], backprop [4, 4]
    dst, nbytes, slot = _out_edges(graph, xent)
    assert {(s, b) for s, b in zip(slot.tolist(), nbytes.tolist())} == {(0, 16), (1, 64)}
    assert graph.out_bytes[xent] == 16 + 64
    control = graph.edge_slot == -1
    assert control.any() and graph.edge_bytes[control].sum() == 0
    assert graph.out_bytes[ix["x"]] == 4 * 8 * 4                        # fed placeholder (_arg_x_0_0)


def test_times_and_untimed_nodes(mlp_profile):
    graph, info, ix, _ = mlp_profile
    assert info["steps"] == 3 and info["nodes"] == graph.num_nodes
    assert graph.comp_us[ix["layer0/MatMul"]] > 0 and graph.comp_us[ix["x"]] > 0
    untimed = graph.comp_us == 0
    init = ix["layer0/w/Initializer/random_uniform/RandomUniform"]
    assert graph.comp_us[init] == 0 and graph.out_bytes[init] == 0          # init only: no step memory
    assert 0 < info["outside_step_nodes"] <= info["untimed_nodes"]
    assert graph.out_bytes[ix["layer0/MatMul"]] > 0
    assert 0 < info["untimed_nodes"] <= untimed.sum() < graph.num_nodes
    assert info["profile"]["model"] == "mlp" and info["profile"]["feeds"] == ["x:0", "y:0"]
    assert np.all(graph.edge_src < graph.edge_dst)                      # topological ids


def test_profile_of_a_graph_with_nested_while_loops_is_a_dag_with_one_group_per_frame(tmp_path):
    previous = tf1.control_flow_v2_enabled()
    tf1.disable_control_flow_v2()
    try:
        graph = tf.Graph()
        with graph.as_default():
            x = tf1.placeholder(tf.float32, [4], name="x")
            v = tf1.get_variable("v", [4], use_resource=True, initializer=tf1.ones_initializer())

            def outer(i, acc):
                inner = tf1.while_loop(lambda j, a: j < 2, lambda j, a: (j + 1, a * 0.5 + v), (0, acc))
                return i + 1, inner[1]

            result = tf1.while_loop(lambda i, a: i < 3, outer, (tf.constant(0), x))
            out = tf.reduce_sum(result[1], name="out")
            init = tf1.global_variables_initializer()
    finally:
        if previous:
            tf1.enable_control_flow_v2()
    with tf1.Session(graph=graph, config=session_config()) as session:
        session.run(init)
        profile(session, out, lambda step: {"x:0": np.full(4, step, np.float32)}, steps=2,
                out_dir=str(tmp_path / "loop"))
    cost, info = load_profile(str(tmp_path / "loop"))
    ix = cost.index()
    loop_ops = ("Enter", "Merge", "Switch", "NextIteration", "Exit", "LoopCond")
    frame = {cost.group[i] for i in range(cost.num_nodes) if cost.ops[i] in loop_ops}
    assert len(frame) == 1 and info["dropped_back_edges"] == 4             # 2 loop vars x 2 loops
    assert cost.group[ix["v"]] in frame                                    # handle read in the body
    assert cost.group[ix["x"]] not in frame and cost.group[ix["out"]] not in frame
    assert info["untimed_nodes"] < cost.num_nodes and cost.comp_us[ix["out"]] > 0


def test_the_time_of_a_functional_while_and_cond_body_is_charged_to_them(tmp_path):
    """Control flow v2 (TF 2's default, in TF1-style graphs too): the session lowers
    the While / If node's body into nodes named under it, which graph.pb lacks; their
    time belongs to that node, not to the unknown records."""
    graph = tf.Graph()
    with graph.as_default():
        x = tf1.placeholder(tf.float32, [64, 64], name="x")
        w = tf1.get_variable("w", [64, 64], initializer=tf1.ones_initializer())
        _, h = tf1.while_loop(lambda i, a: i < 20, lambda i, a: (i + 1, tf.tanh(tf.matmul(a, w))),
                              (tf.constant(0), x), name="loop")
        h = tf.cond(tf.reduce_sum(h) > 0.0, lambda: tf.matmul(h, w), lambda: h - 1.0, name="branch")
        out = tf.reduce_sum(h, name="out")
        init = tf1.global_variables_initializer()
    with tf1.Session(graph=graph, config=session_config()) as session:
        session.run(init)
        profile(session, out, lambda step: {"x:0": np.full((64, 64), 0.01, np.float32)}, steps=2,
                out_dir=str(tmp_path / "cf"))
    cost, info = load_profile(str(tmp_path / "cf"))
    ix = cost.index()
    assert cost.ops[ix["loop"]].endswith("While") and cost.ops[ix["branch"]].endswith("If")
    assert info["unknown_stats_records"] == 0
    # 20 iterations of a MatMul and a Tanh: far above the one MatMul outside any body
    assert cost.comp_us[ix["loop"]] > 5 * cost.comp_us[ix["out"]] > 0
    assert cost.comp_us[ix["branch"]] > 0


def test_a_functional_op_taking_variables_ties_none_of_them(tmp_path):
    """A tf.cond (an If node) updating two variables: the session lowers it, and each
    update runs with its variable, so the If joins neither group, nor they each other."""
    graph = tf.Graph()
    with graph.as_default():
        x = tf1.placeholder(tf.float32, [4], name="x")
        a = tf1.get_variable("a", [4], use_resource=True, initializer=tf1.ones_initializer())
        b = tf1.get_variable("b", [4], use_resource=True, initializer=tf1.ones_initializer())
        step = tf.cond(tf.reduce_sum(x) > 0, lambda: tf.group(a.assign_add(x), b.assign_add(2 * x)),
                       lambda: tf.group(a.assign_sub(x)), name="branch")
    cost = _profiled(graph, step, tmp_path)
    ix = cost.index()
    assert cost.ops[ix["branch"]] == "If"
    groups = [cost.group[ix[name]] for name in ("a", "b", "branch")]
    assert len(set(groups)) == 3


def test_a_branch_handing_on_a_variables_handle_stays_with_it(tmp_path):
    """An If whose output is a handle: its readers run with the variable behind it."""
    graph = tf.Graph()
    with graph.as_default():
        x = tf1.placeholder(tf.float32, [4], name="x")
        c0 = tf1.get_variable("c0", [4], use_resource=True, initializer=tf1.ones_initializer())
        c1 = tf1.get_variable("c1", [4], use_resource=True, initializer=tf1.ones_initializer())
        handle = tf.cond(tf.reduce_sum(x) > 0, lambda: tf.identity(c0.handle), lambda: tf.identity(c1.handle),
                         name="pick")
        read = tf.raw_ops.ReadVariableOp(resource=handle, dtype=tf.float32, name="read")
        out = tf.reduce_sum(read * x, name="out")
    cost = _profiled(graph, out, tmp_path)
    ix = cost.index()
    assert cost.ops[ix["pick"]].endswith("If")
    assert cost.group[ix["pick"]] == cost.group[ix["c0"]] == cost.group[ix["c1"]] == cost.group[ix["read"]]


def test_a_while_loop_reading_a_variable_stays_with_it(tmp_path):
    graph = tf.Graph()
    with graph.as_default():
        x = tf1.placeholder(tf.float32, [4], name="x")
        w = tf1.get_variable("w", [4], use_resource=True, initializer=tf1.ones_initializer())
        _, h = tf1.while_loop(lambda i, a: i < 3, lambda i, a: (i + 1, a * w.read_value()), (0, x), name="loop")
        out = tf.reduce_sum(h, name="out")
    cost = _profiled(graph, out, tmp_path)
    ix = cost.index()
    assert cost.ops[ix["loop"]].endswith("While") and cost.group[ix["loop"]] == cost.group[ix["w"]]


def test_a_call_xla_compiles_stays_with_its_variables(tmp_path):
    """A call XLA must compile (Keras' grouped convolution on a CPU calls one: ConvNeXt's
    depthwise convolutions) runs as one cluster on one device, and XLA refuses a variable
    elsewhere: unlike a call the session lowers, it joins its variable's group (issue 52)."""
    graph = tf.Graph()
    with graph.as_default():
        x = tf1.placeholder(tf.float32, [4], name="x")
        k = tf1.get_variable("k", [4], use_resource=True, initializer=tf1.ones_initializer())
        out = tf.reduce_sum(tf.function(lambda: x * k.read_value(), jit_compile=True)(), name="out")
    cost = _profiled(graph, out, tmp_path)
    ix = cost.index()
    calls = [i for i, op in enumerate(cost.ops) if op.endswith("PartitionedCall")]
    assert len(calls) == 1 and cost.group[calls[0]] == cost.group[ix["k"]]


def _profiled(graph, fetch, tmp_path):
    """The CostGraph of one traced step of `graph` (its variables initialised, x:0 fed ones)."""
    with graph.as_default():
        init = tf1.global_variables_initializer()
    with tf1.Session(graph=graph, config=session_config()) as session:
        session.run(init)
        profile(session, fetch, lambda i: {"x:0": np.ones(4, np.float32)}, steps=1, out_dir=str(tmp_path / "p"))
    return load_profile(str(tmp_path / "p"))[0]


def test_ops_without_gpu_kernels_are_pinned_to_cpu():
    ops = ["MatMul", "SaveV2", "NoOp", "NotARegisteredOp"]
    assert kernel_pins(ops, None) == [""] * 4                  # a build without GPU kernels: unknown
    _, cpu_only = op_defs.record(ops)
    if cpu_only is None:
        pytest.skip("this TensorFlow build registers no GPU kernels: nothing can be pinned")
    assert cpu_only == ["SaveV2"]
    assert kernel_pins(ops, set(cpu_only)) == ["", "CPU", "", ""]


def test_ops_without_cpu_kernels_are_pinned_to_gpu():
    """CudnnRNN and NcclAllReduce have GPU kernels only: pinned to "GPU", so that a
    cluster with the host as a device never puts them there; the rest are not."""
    ops = ["MatMul", "CudnnRNN", "SaveV2", "NcclAllReduce", "NotARegisteredOp"]
    gpu_only = op_defs.gpu_only_ops(ops)
    if gpu_only is None:
        pytest.skip("this TensorFlow build registers no GPU kernels: nothing can be known")
    assert gpu_only == ["CudnnRNN", "NcclAllReduce"]
    assert kernel_pins(ops, {"SaveV2"}, set(gpu_only)) == ["", "GPU", "CPU", "GPU", ""]


def test_ref_variables_their_aliases_and_updaters(tmp_path):
    graph = tf.Graph()
    with graph.as_default():
        x = tf1.placeholder(tf.float32, [2, 3], name="x")
        w = tf1.Variable(tf1.ones([3, 5]), name="w", use_resource=False)      # VariableV2 + w/read
        loss = tf.reduce_sum(tf.matmul(x, w, name="mm"), name="loss")
        train = tf1.train.GradientDescentOptimizer(0.1).minimize(loss, name="train")
        init = tf1.global_variables_initializer()
    with tf1.Session(graph=graph, config=session_config()) as session:
        session.run(init)
        profile(session, train, {x: np.ones((2, 3), np.float32)}, steps=1, out_dir=str(tmp_path / "p"))
    cost, _ = load_profile(str(tmp_path / "p"))
    ix = cost.index()
    assert cost.ops[ix["w"]] == "VariableV2" and cost.kind[ix["w"]] == RESIDUAL
    assert cost.persist_bytes[ix["w"]] == 3 * 5 * 4 and cost.out_bytes[ix["w"]] == 0   # ref output: an alias
    apply = ix["train/update_w/ApplyGradientDescent"]
    for name in ("w/read", "w/Assign"):
        assert cost.kind[ix[name]] == REFERENCE and cost.out_bytes[ix[name]] == 0, name
    assert cost.kind[apply] == REFERENCE
    assert len({cost.group[ix[n]] for n in ("w", "w/read", "w/Assign")} | {cost.group[apply]}) == 1
    dst, nbytes, _ = _out_edges(cost, ix["w/read"])
    assert nbytes[list(dst).index(ix["mm"])] == 3 * 5 * 4        # the tensor still crosses devices whole


def test_scratch_memory_of_convolutions_is_loaded_from_step_stats(tmp_path):
    graph = tf.Graph()
    with graph.as_default():
        x = tf1.placeholder(tf.float32, [4, 32, 32, 16], name="x")
        w = tf1.get_variable("w", [3, 3, 16, 32], use_resource=True)
        y = tf.nn.conv2d(x, w, strides=1, padding="SAME", name="conv")
        logits = tf.reduce_mean(y, axis=[1, 2])
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
            labels=tf.zeros([4], tf.int32), logits=logits), name="loss")
        train = tf1.train.MomentumOptimizer(0.1, 0.9).minimize(loss, name="train")
        init = tf1.global_variables_initializer()
    with tf1.Session(graph=graph, config=session_config()) as session:
        session.run(init)
        profile(session, train, {"x:0": np.ones((4, 32, 32, 16), np.float32)}, steps=2,
                out_dir=str(tmp_path / "conv"))
    cost, _ = load_profile(str(tmp_path / "conv"))
    conv = [i for i in range(cost.num_nodes) if cost.ops[i].startswith("Conv2D")]
    assert conv and max(cost.temp_bytes[conv]) > 0                  # TF's temp_memory_size
    assert cost.temp_bytes[cost.index()["loss"]] == 0
    assert CostGraph.from_dict(cost.to_dict()).temp_bytes.tolist() == cost.temp_bytes.tolist()

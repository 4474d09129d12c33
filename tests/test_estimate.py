"""Estimated profiles (Grappler's virtual cluster) on small graphs with known costs."""

import dataclasses
import json

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from pardnn.cli import main
from pardnn.base.errors import UserError
from pardnn.graph import RESIDUAL
from pardnn.models import Model, resolve_knobs
from pardnn_builtin_models import load_module
from pardnn.tf import estimate
from pardnn.tf.profile_loader import load_profile
from pardnn.tf.graphdef import graph_table, profile_files, read_graph_def
from pardnn.tf.op_defs import from_tensorflow
from pardnn.tf.grappler_ops import fallback_ns, is_modelled
from pardnn.tf.profiling import profile_model
from pardnn.tf.stepstats import read_step_stats

from helpers.tf_models import N, matmul_model

pytestmark = pytest.mark.tf
tf1 = tf.compat.v1
def by_name(graph):
    return {name: i for i, name in enumerate(graph.names)}


def test_matmul_and_adam_costs_follow_the_roofline(tmp_path):
    """H100: N^3 MACs at 66.9 TFLOPS plus 3 N^2 floats at 3350 GB/s, rounded up to ns each;
    ResourceApplyAdam (no Grappler model): var, m, v read and written, grad and six
    scalars read, over the bandwidth. FP32 and no per-op overhead: Grappler's own costs."""
    target = estimate.gpu_target("dgx-h100", op_overhead_us=0, precision="fp32")
    doc = estimate.estimate_model(matmul_model(), target, str(tmp_path))
    graph, info = load_profile(str(tmp_path))
    ids = by_name(graph)
    flops_ns = np.ceil(2 * N**3 / (132 * 128 * 2 * 1980 * 1e-3))
    bytes_ns = np.ceil(3 * N * N * 4 / 3350.0)
    assert graph.comp_us[ids["fwd"]] == pytest.approx((flops_ns + bytes_ns) / 1e3)
    adam = ids["train/update_w/ResourceApplyAdam"]
    assert graph.comp_us[adam] == pytest.approx(round((7 * N * N * 4 + 6 * 4) / 3350.0) / 1e3)
    assert doc["costs"]["unmodelled_ops"]["ResourceApplyAdam"] == 1
    assert "train/update_w/ResourceApplyAdam" in doc["costs"]["fallback_nodes"]


def fwd_and_adam_us(target, out):
    estimate.estimate_model(matmul_model(), target, str(out))
    graph, _ = load_profile(str(out))
    ids = by_name(graph)
    return graph.comp_us, graph.comp_us[ids["fwd"]], graph.comp_us[ids["train/update_w/ResourceApplyAdam"]]


def test_op_overhead_is_added_once_per_op(tmp_path):
    """Every op's time grows by exactly the overhead, whatever its kind; 0 changes nothing."""
    bare, _, _ = fwd_and_adam_us(estimate.gpu_target("dgx1-v100", op_overhead_us=0), tmp_path / "0")
    paid, _, _ = fwd_and_adam_us(estimate.gpu_target("dgx1-v100", op_overhead_us=7.5), tmp_path / "7")
    timed = bare > 0
    assert timed.sum() > 20
    assert np.allclose(paid[timed] - bare[timed], 7.5, atol=1e-3)
    doc = json.loads((tmp_path / "7" / "profile.json").read_text())["costs"]
    assert doc["op_overhead_us"] == 7.5 and doc["precision"] == "fp32"


def test_v100_defaults_are_fp32_so_zero_overhead_gives_grappler_costs(tmp_path):
    """On a V100 TF runs MatMul in FP32: with --op-overhead 0 the forward MatMul costs
    Grappler's roofline, N^3 MACs at 15.67 TFLOPS plus 3 N^2 floats at 900 GB/s."""
    target = estimate.gpu_target("dgx2", op_overhead_us=0)
    assert target.precision == "fp32" and estimate.gpu_target("dgx2").op_overhead_us == 8.0
    _, fwd_us, _ = fwd_and_adam_us(target, tmp_path)
    flops_ns = np.ceil(2 * N**3 / (80 * 64 * 2 * 1530 * 1e-3))
    assert fwd_us == pytest.approx((flops_ns + np.ceil(3 * N * N * 4 / 900.0)) / 1e3)


def test_precision_scales_matmul_compute_by_the_ratio_of_the_peaks(tmp_path):
    """fwd is N^3 MACs: its compute term (ceil of FLOPs / FP32 peak, in ns) becomes FLOPs /
    tensor peak; the memory term and the Adam update (no tensor cores) stay."""
    flops = 2 * N**3
    times = {}
    for precision in ("fp32", "tf32", "fp16"):
        target = estimate.gpu_target("dgx-h100", op_overhead_us=0, precision=precision)
        times[precision] = fwd_and_adam_us(target, tmp_path / precision)[1:] + (target.tensor_gflops,)
    fp32_us, adam_us, peak32 = times["fp32"]
    memory_us = fp32_us - np.ceil(flops / peak32) / 1e3
    for precision in ("tf32", "fp16"):
        fwd_us, adam, peak = times[precision]
        assert adam == adam_us
        assert fwd_us - memory_us == pytest.approx(np.ceil(flops / peak32) / 1e3 * peak32 / peak, abs=1e-3)
    assert times["tf32"][2] / peak32 == pytest.approx(494.7 / 66.9, rel=1e-2)
    assert estimate.gpu_target("dgx-h100").precision == "tf32"


def test_a_graph_bigger_than_the_target_gpu_is_still_costed(tmp_path):
    """Placement exists for models that do not fit one GPU: costing such a graph on a
    GPU of 4 KiB (the matmul model needs about 1 MiB) gives the same op times as on
    the real preset instead of Grappler's 'Graph requires ... bytes' refusal."""
    real = estimate.gpu_target("dgx-h100")
    small = dataclasses.replace(real, properties={**real.properties, "memory_size": 1 << 12})
    estimate.estimate_model(matmul_model(), small, str(tmp_path / "small"))
    estimate.estimate_model(matmul_model(), real, str(tmp_path / "real"))
    tiny, _ = load_profile(str(tmp_path / "small"))
    full, _ = load_profile(str(tmp_path / "real"))
    assert np.array_equal(tiny.comp_us, full.comp_us)
    assert tiny.comp_us[by_name(tiny)["fwd"]] > 0


def test_estimated_mlp_profile_loads_with_costs_and_variable_bytes(tmp_path):
    module = load_module("mlp")
    knobs = resolve_knobs(module, "tiny")
    doc = estimate.estimate_model(module.build(**knobs), estimate.gpu_target("dgx1-v100"), str(tmp_path),
                                  meta={"model": "mlp", "knobs": knobs})
    graph, info = load_profile(str(tmp_path))
    matmuls = [i for i, op in enumerate(graph.ops) if op == "MatMul"]
    assert len(matmuls) == 9 and all(graph.comp_us[i] > 0 for i in matmuls)
    ids = by_name(graph)
    w = ids["layer0/w"]
    assert graph.kind[w] == RESIDUAL and graph.persist_bytes[w] == knobs["inputs"] * knobs["hidden"] * 4
    assert graph.persist_bytes[ids["layer0/w/Adam"]] == graph.persist_bytes[w]
    costs = json.loads((tmp_path / "profile.json").read_text())["costs"]
    assert costs == doc["costs"] and info["profile"]["costs"]["source"] == "estimated"
    assert costs["target"] == "dgx1-v100" and costs["device"]["name"] == "Tesla V100-SXM2-32GB"
    assert costs["unmodelled"] + costs["dropped"] == len(costs["fallback_nodes"])
    assert costs["peak_memory_bytes"] > 0


def _timed_names(profile_dir):
    graph_pb, steps = profile_files(profile_dir)
    graph_def = read_graph_def(graph_pb)
    table = graph_table(graph_def, from_tensorflow({n.op for n in graph_def.node}))
    timed = read_step_stats(steps, table).timed
    return {name for name, t in zip(table.names, timed) if t}


def test_estimated_and_measured_profiles_time_the_same_nodes(tmp_path):
    module = load_module("mlp")
    knobs = resolve_knobs(module, "tiny")
    profile_model(module.build(**knobs), steps=1, out_dir=str(tmp_path / "measured"))
    doc = estimate.estimate_model(module.build(**knobs), estimate.gpu_target("dgx-a100"), str(tmp_path / "est"))
    measured, estimated = _timed_names(tmp_path / "measured"), _timed_names(tmp_path / "est")
    assert estimated == measured and len(measured) > 100
    assert doc["costs"]["dropped"] == 0 and doc["costs"]["scheduled"] == len(estimated)


def _two_op_graph():
    graph = tf.Graph()
    with graph.as_default():
        x = tf1.placeholder(tf.float32, [4, 8], name="x")
        tf.reduce_mean(x, axis=1, name="mean")            # Mean: no Grappler model
        tf.nn.log_softmax(x, name="logsm")                 # LogSoftmax: no Grappler model
    return graph


def test_dropped_and_unmodelled_nodes_take_the_fallback():
    """x has a Grappler record (128 bytes out); logsm has one too (unmodelled: re-costed);
    mean has none (dropped: added). Bandwidth 2 GB/s."""
    graph = _two_op_graph()
    stats = tf1.RunMetadata().step_stats
    dev = stats.dev_stats.add(device="/device:GPU:0")
    for name in ("x", "logsm"):
        ns = dev.node_stats.add(node_name=name, all_end_rel_nanos=1, op_end_rel_nanos=1)
        ns.output.add(slot=0).tensor_description.allocation_description.requested_bytes = 128
    info = estimate._apply_fallbacks(graph, stats, {"x", "logsm", "mean", "mean/reduction_indices"}, 2.0, 1.0)
    record = {ns.node_name: ns for ns in dev.node_stats}
    # mean: x (128) + axis const (4, static) in, [4] floats (16, static) out
    assert record["mean"].all_end_rel_nanos == round(fallback_ns(132, 16, 0, "Mean", 2.0)) == 74
    assert record["mean"].timeline_label == "Mean"
    assert record["logsm"].all_end_rel_nanos == 128          # (128 + 128) / 2
    assert record["x"].all_end_rel_nanos == 1                # modelled: Grappler's time kept
    assert info["dropped_ops"] == {"Const": 1, "Mean": 1}     # mean and its axis constant
    assert info["unmodelled_ops"] == {"LogSoftmax": 1}
    assert info["fallback_nodes"] == ["mean", "mean/reduction_indices", "logsm"]


def test_conv3d_fallback_adds_flops_over_peak():
    """[1,4,4,4,2] * [3,3,3,2,3] SAME -> [1,4,4,4,3]: 2 x 192 outputs x 27 taps x 2 channels
    = 20736 FLOPs at 20.736 GFLOP/s = 1000 ns; 512 + 648 + 768 bytes at 1.928 GB/s = 1000 ns.
    Both gradients do the same multiply-adds."""
    graph = tf.Graph()
    with graph.as_default():
        x = tf1.placeholder(tf.float32, [1, 4, 4, 4, 2], name="x")
        k = tf1.placeholder(tf.float32, [3, 3, 3, 2, 3], name="k")
        y = tf.nn.conv3d(x, k, [1] * 5, "SAME", name="conv")
        tf.gradients(tf.reduce_sum(y), [x, k])
    names = {"conv": "Conv3D", "gradients/conv_grad/Conv3DBackpropInputV2": "Conv3DBackpropInputV2",
             "gradients/conv_grad/Conv3DBackpropFilterV2": "Conv3DBackpropFilterV2"}
    for name, op_type in names.items():
        op = graph.get_operation_by_name(name)
        assert op.type == op_type and estimate._conv_flops(op, {}) == 20736
    with graph.as_default():   # 2-D: [1,4,4,2] * [3,3,2,3] SAME -> 2 x 48 outputs x 9 taps x 2 channels
        conv2d = tf.nn.conv2d(x[:, 0], k[0], 1, "SAME", name="conv2d").op
    assert estimate._conv_flops(conv2d, {}) == 2 * 48 * 9 * 2
    stats = tf1.RunMetadata().step_stats
    stats.dev_stats.add(device="/device:GPU:0")
    estimate._apply_fallbacks(graph, stats, {"x", "k", "conv"}, 1.928, 20.736)
    record = {ns.node_name: ns for ns in stats.dev_stats[0].node_stats}
    assert record["conv"].all_end_rel_nanos == 2000


def conv_model(conv3d=False):
    """loss = sum(conv(x, w) @ m) with plain SGD: x [8,32,32,64] * w [3,3,64,64] SAME (or
    the 3-D [4,4,32,32,64] * [1,3,3,64,64]), 2 x outputs x 576 taps-channels FLOPs per
    conv op, then a MatMul by m [64,64] that no conv share may change."""
    shape = [4, 4, 32, 32, 64] if conv3d else [8, 32, 32, 64]
    graph = tf.Graph()
    with graph.as_default():
        x = tf1.placeholder(tf.float32, shape, name="x")
        w = tf1.get_variable("w", ([1] if conv3d else []) + [3, 3, 64, 64], use_resource=True)
        m = tf1.get_variable("m", [64, 64], use_resource=True)
        conv = tf.nn.conv3d(x, w, [1] * 5, "SAME", name="conv") if conv3d else tf.nn.conv2d(x, w, 1, "SAME", name="conv")
        loss = tf.reduce_sum(tf.matmul(tf.reshape(conv, [-1, 64]), m, name="mm"), name="loss")
        train = tf1.train.GradientDescentOptimizer(0.1).minimize(loss, name="train")
        init = tf1.global_variables_initializer()
    return Model(graph=graph, train_op=train.name, loss=loss.name, init=init.name,
                 feed=lambda step: {"x:0": np.ones(shape, np.float32)})


CONV_OPS = ("conv", "gradients/conv_grad/Conv{d}BackpropInput{v}", "gradients/conv_grad/Conv{d}BackpropFilter{v}")


@pytest.mark.parametrize("preset, precision, conv3d", [("dgx-h100", "tf32", False), ("dgx2", "fp32", False),
                                                      ("dgx-h100", "tf32", True)])
def test_conv_efficiency_divides_only_the_convolutions_compute(tmp_path, preset, precision, conv3d):
    """At half the rate each convolution (2-D: Grappler's compute term at the precision's
    rate; 3-D: the fallback's) takes FLOPs / rate longer (1.2 to 9.7 us here, against
    times kept to the ns); every other op, the MatMuls included, is unchanged, and at
    FP32 no op counts as re-costed on tensor cores."""
    costs, targets, docs = {}, {}, {}
    for share in (1.0, 0.5):
        targets[share] = estimate.gpu_target(preset, op_overhead_us=0, precision=precision, conv_efficiency=share)
        docs[share] = estimate.estimate_model(conv_model(conv3d), targets[share], str(tmp_path / str(share)))
        assert docs[share]["costs"]["conv_efficiency"] == share
        costs[share] = load_profile(str(tmp_path / str(share)))[0]
    names = [n.format(d="3D" if conv3d else "2D", v="V2" if conv3d else "") for n in CONV_OPS]
    flops = 2 * (4 * 4 * 32 * 32 * 64 if conv3d else 8 * 32 * 32 * 64) * 9 * 64
    ids = by_name(costs[1.0])
    for name in names:
        extra_us = costs[0.5].comp_us[ids[name]] - costs[1.0].comp_us[ids[name]]
        assert extra_us == pytest.approx(flops / targets[1.0].tensor_gflops / 1e3, rel=2e-3)
    assert any(costs[1.0].ops[i] == "MatMul" for i in ids.values())
    others = [i for n, i in ids.items() if n not in names]
    assert np.array_equal(costs[0.5].comp_us[others], costs[1.0].comp_us[others])
    if precision == "fp32":
        assert docs[0.5]["costs"]["tensor_core_ops"] == 0


def test_conv_efficiency_is_only_for_estimates_and_shown_in_the_summary(tmp_path, capsys):
    assert main(["profile", "mlp", "--size", "tiny", "--conv-efficiency", "0.5", "-o", str(tmp_path / "p")]) == 2
    assert "--conv-efficiency apply to estimated costs: add --estimate PRESET" in capsys.readouterr().err
    assert main(["profile", "mlp", "--size", "tiny", "--estimate", "dgx-h100", "--conv-efficiency", "0.35",
                 "-o", str(tmp_path / "q")]) == 0
    assert "(dgx-h100, tf32 MatMul/convolution, convolutions at 35%, 5 us per op)" in capsys.readouterr().out
    with pytest.raises(UserError, match=r"conv_efficiency: cannot use 'high' \(give a share"):
        estimate.gpu_target("dgx-h100", "estimate", conv_efficiency="high")
    assert estimate.gpu_target("dgx-h100", conv_efficiency=np.float32(0.5)).conv_efficiency == 0.5


def test_convolutions_get_a_workspace_of_their_largest_operand_and_others_none(tmp_path):
    """[8,32,32,16] * [3,3,16,32] SAME: the input is 524,288 B, the output 1,048,576 B, so
    the forward conv and its input gradient hold 1 MiB of scratch while they run; the
    filter gradient's largest operand is the same 1 MiB output gradient."""
    graph = tf.Graph()
    with graph.as_default():
        x = tf1.placeholder(tf.float32, [8, 32, 32, 16], name="x")
        w = tf1.get_variable("w", [3, 3, 16, 32], use_resource=True)
        loss = tf.reduce_sum(tf.nn.conv2d(x, w, 1, "SAME", name="conv"), name="loss")
        train = tf1.train.GradientDescentOptimizer(0.1).minimize(loss, name="train")
        init = tf1.global_variables_initializer()
    model = Model(graph=graph, train_op=train.name, loss=loss.name, init=init.name,
                  feed=lambda step: {"x:0": np.ones((8, 32, 32, 16), np.float32)})
    estimate.estimate_model(model, estimate.gpu_target("dgx-h100"), str(tmp_path))
    cost, _ = load_profile(str(tmp_path))
    temp = {cost.names[i]: int(cost.temp_bytes[i]) for i in np.flatnonzero(cost.temp_bytes)}
    assert temp["conv"] == 8 * 32 * 32 * 32 * 4
    assert set(temp) == {"conv", "gradients/conv_grad/Conv2DBackpropInput",
                         "gradients/conv_grad/Conv2DBackpropFilter"}
    assert all(v == 8 * 32 * 32 * 32 * 4 for v in temp.values())


def test_fallback_rule():
    # 3000 bytes at 1.5 GB/s = 2000 ns; a non-updating op ignores its resource inputs
    assert fallback_ns(1000, 2000, 4096, "Mean", 1.5) == pytest.approx(2000.0)
    # a dense in-place update reads and writes its variables: + 2 x 4096 bytes
    assert fallback_ns(1000, 0, 4096, "ResourceApplyAdam", 1.0) == pytest.approx(1000 + 8192)
    assert fallback_ns(1000, 0, 0, "Conv3D", 1.0, flops=5000, conv_gflops=2.5) == pytest.approx(3000)
    assert is_modelled("MatMul") and is_modelled("Conv2D") and not is_modelled("ResourceApplyAdam")


def test_cli_unknown_preset_exits_2_with_the_list(tmp_path, capsys):
    out = tmp_path / "prof"
    assert main(["profile", "mlp", "--estimate", "tpu-v4", "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--estimate: unknown GPU preset 'tpu-v4'" in err
    assert "gpu:K, dgx1-v100, dgx2, dgx-a100, dgx-h100" in err
    assert not out.exists()


@pytest.mark.parametrize("flags, message", [
    (["--op-overhead=-5us"], "--op-overhead: cannot use '-5us' (give a time from 0 to 1s"),
    (["--op-overhead", "fast"], "--op-overhead: cannot use 'fast'"),
    (["--precision", "int8"], "--precision: unknown precision 'int8' (choose from fp32, tf32, fp16)"),
    (["--precision", "tf32", "--estimate", "dgx1-v100"],
     "--precision: dgx1-v100 (Tesla V100-SXM2-32GB) has no tf32 tensor cores (choose from fp32, fp16)"),
    (["--conv-efficiency", "0"], "--conv-efficiency: cannot use '0' (give a share of the peak rate from 0.01 to 1"),
    (["--conv-efficiency", "1.5"], "--conv-efficiency: cannot use '1.5'"),
    (["--conv-efficiency", "1e-300"], "--conv-efficiency: cannot use '1e-300'"),
    (["--conv-efficiency", "inf"], "--conv-efficiency: cannot use 'inf'"),
    (["--conv-efficiency", "nan"], "--conv-efficiency: cannot use 'nan'"),
    (["--conv-efficiency", "most"], "--conv-efficiency: cannot use 'most'"),
])
def test_cli_bad_overhead_or_precision_exits_2(tmp_path, capsys, flags, message):
    out = tmp_path / "prof"
    args = ["profile", "mlp", "--size", "tiny", "--estimate", "dgx-h100", *flags, "-o", str(out)]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err
    assert not out.exists()


def test_cli_estimated_profile_places_unchanged(tmp_path, capsys):
    prof, placed = tmp_path / "prof", tmp_path / "placed"
    assert main(["profile", "mlp", "--size", "tiny", "--estimate", "dgx-a100:4", "--op-overhead", "2us",
                 "--precision", "fp16", "-o", str(prof)]) == 0
    assert "A100-SXM4-40GB (dgx-a100, fp16 MatMul/convolution, 2 us per op)" in capsys.readouterr().out
    costs = json.loads((prof / "profile.json").read_text())["costs"]
    assert (costs["target"], costs["precision"], costs["op_overhead_us"]) == ("dgx-a100", "fp16", 2.0)
    assert costs["matmul_peak_gflops"] == 312_000.0 and costs["tensor_core_ops"] == 9
    assert main(["place", str(prof), "--devices", "dgx-a100:2", "--algorithm", "round-robin",
                 "-o", str(placed)]) == 0
    report = json.loads((placed / "report.json").read_text())
    rows = dict(line.split(",") for line in (placed / "placement.csv").read_text().splitlines()[1:])
    assert len(rows) == report["num_nodes"] and set(rows.values()) == set(report["devices"])
    graph_def = tf.compat.v1.GraphDef.FromString((placed / "placed_graph.pb").read_bytes())
    assert all(node.device == rows[node.name] for node in graph_def.node if node.name in rows)
    assert len(report["devices"]) == 2 and sum(node.name in rows for node in graph_def.node) == len(rows)


def test_an_estimate_asks_for_no_gpu_here(tmp_path):
    out = tmp_path / "est"
    assert main(["profile", "mlp", "--size", "tiny", "--estimate", "dgx-a100", "--devices", "gpu",
                 "-o", str(out)]) == 0
    assert (out / "graph.pb").exists()

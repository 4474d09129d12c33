"""tools/gpu_kernel_times.py (with gpu_ops.py and gpu_kernels.py): the estimated ops it
extracts, the shapes and padding the torch kernels must match, the comparison it prints
and its errors (the kernels themselves run only where PyTorch and a GPU are)."""

import csv
import json
import math

import numpy as np
import pytest

import tools.gpu_kernel_times as gkt
import tools.gpu_kernels as gpu_kernels
import tools.gpu_ops as gpu_ops

from pardnn.tf.protos import GraphDef


@pytest.mark.tf
def test_an_estimated_profile_gives_its_matmul_with_shapes_and_cost(tmp_path):
    pytest.importorskip("tensorflow")
    from helpers.tf_models import N, matmul_model
    from pardnn.tf import estimate
    estimate.estimate_model(matmul_model(), estimate.gpu_target("dgx-h100"), str(tmp_path / "mm"))
    ops = gpu_ops.extract([str(tmp_path / "mm")])
    matmuls = [s["sig"] for s in ops["signatures"] if s["sig"]["op"] == "MatMul"]
    # x is [None, N] in the GraphDef: the fed N rows come from the step stats
    assert {(s["attrs"]["transpose_a"], s["attrs"]["transpose_b"]) for s in matmuls} == {
        (False, False), (True, False), (False, True)}       # forward, dw = x^T g, dx = g w^T
    assert all(s["ins"] == [[N, N], [N, N]] and s["out"] == [N, N] for s in matmuls)
    assert ops["families"]["mm"]["op_overhead_us"] == 5.0
    nodes = [us for s in ops["signatures"] for v in s["nodes"].values() for us in v]
    assert min(nodes) > 0               # initializers (not in the step) are left out
    assert any(s["op"] == "ResourceApplyAdam" for s in (e["sig"] for e in ops["signatures"]))


@pytest.mark.parametrize("size,kernel,stride,dilation",
                         [(32, 3, 2, 1), (32, 3, 1, 1), (2, 2, 1, 1), (17, 5, 3, 1), (9, 3, 1, 2), (7, 1, 2, 1)])
def test_same_padding_gives_tensorflows_output_size(size, kernel, stride, dilation):
    sig = {"attrs": {"padding": "SAME", "strides": [1, stride, 1], "dilations": [1, dilation, 1]},
           "ins": [[1, size, 1], [kernel, 1, 1]]}
    (pad,), (extra,) = gpu_kernels._conv_padding(sig, 1)
    span = (kernel - 1) * dilation + 1
    torch_out = (size + extra + 2 * pad - span) // stride + 1
    assert torch_out == math.ceil(size / stride)
    assert extra in (0, 1)


def test_valid_padding_pads_nothing():
    sig = {"attrs": {"padding": "VALID"}, "ins": [[1, 8, 8, 1], [3, 3, 1, 1]]}
    assert gpu_kernels._conv_padding(sig, 2) == ([0, 0], [0, 0])


def test_spearman_of_ties_and_order():
    assert gkt.spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert gkt.spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    # ties share their mean rank: ranks (0.5, 0.5, 2, 3) against (0, 1, 2, 3)
    expected = np.corrcoef([0.5, 0.5, 2, 3], [0, 1, 2, 3])[0, 1]
    assert gkt.spearman([5, 5, 6, 7], [1, 2, 3, 4]) == pytest.approx(expected)


def test_compare_sets_each_profiles_estimate_against_the_kernels(capsys):
    ops = {"commit": "commit x", "families": {"f": {"nodes": 4, "est_total_us": 40.0, "op_overhead_us": 5.0}},
           "signatures": [{"sig": {"op": "MatMul", "attrs": {}, "ins": [[1000, 1000]] * 2, "out": [1000, 1000]},
                           "nodes": {"f": [20.0]}},
                          {"sig": {"op": "Mul", "attrs": {}, "ins": [[4], [4]]}, "nodes": {"f": [6.0, 6.0]}},
                          {"sig": {"op": "Sum", "attrs": {}, "ins": [[4]]}, "nodes": {"f": [8.0]}}]}
    times = {"device": "GPU", "torch": "2", "cudnn": 9, "repeats": 20, "eager_overhead_us": 8.0,
             "times": [{"index": 0, "us": 10.0, "error": None}, {"index": 1, "us": 2.0, "error": None},
                       {"index": 2, "us": None, "error": "RuntimeError: x"}]}
    gkt.compare(json.loads(json.dumps(ops)), times)
    out = capsys.readouterr().out
    # measured: MatMul (20 est, 10 us) and two Muls (6 est, 2 us each): 32 / 14, 3 of 4 nodes,
    # 32 of 40 us estimated; less 5 us per op: (15 + 1 + 1) / 14
    assert "| f | 4 | 3 | 80% | 1.00 | 2.29 | 1.21 | 3.00 |" in out
    assert "| MatMul | 1 | 71.4% | 2.00 | 2.00 |" in out
    assert "| MatMul | 200 | 100 |" in out      # 2e9 FLOPs in 10 us measured, 20 us estimated
    assert "every op in" not in out
    gkt.compare(ops, dict(times, dtype="float16"))
    assert "; every op in float16" in capsys.readouterr().out.splitlines()[0]
    assert "1 signatures have no time, e.g. RuntimeError: x" in out


def test_flops_count_each_multiply_add_twice():
    mm = {"op": "MatMul", "attrs": {"transpose_a": True}, "ins": [[7, 3], [7, 5]], "out": [3, 5]}
    assert gpu_ops.flops(mm) == 2 * 3 * 5 * 7
    bmm = {"op": "BatchMatMulV2", "attrs": {"adj_x": False}, "ins": [[4, 3, 7], [4, 7, 5]], "out": [4, 3, 5]}
    assert gpu_ops.flops(bmm) == 2 * 4 * 3 * 5 * 7
    conv = {"op": "Conv2D", "attrs": {}, "ins": [[2, 8, 8, 3], [3, 3, 3, 16]], "out": [2, 8, 8, 16]}
    dfilter = {"op": "Conv2DBackpropFilter", "attrs": {}, "ins": [[2, 8, 8, 3], [3, 3, 3, 16], [2, 8, 8, 16]],
               "out": [3, 3, 3, 16]}
    assert gpu_ops.flops(conv) == gpu_ops.flops(dfilter) == 2 * (2 * 8 * 8 * 16) * (3 * 3 * 3)
    assert gpu_ops.flops({"op": "Mul", "attrs": {}, "ins": [[4], [4]], "out": [4]}) == 0


def test_kernel_outputs_must_have_tensorflows_shape_in_torchs_order():
    conv = {"op": "Conv2D", "attrs": {"padding": "SAME", "strides": [1, 2, 2, 1]},
            "ins": [[8, 32, 32, 3], [3, 3, 3, 16]], "out": [8, 16, 16, 16]}
    assert gpu_kernels.expected_shape(conv) == [8, 16, 16, 16]          # NHWC -> NCHW
    conv["out"] = [8, 16, 16, 24]
    assert gpu_kernels.expected_shape(conv) == [8, 24, 16, 16]
    dfilter = dict(conv, op="Conv2DBackpropFilter", out=[3, 3, 3, 24])
    assert gpu_kernels.expected_shape(dfilter) == [24, 3, 3, 3]         # HWIO -> OIHW
    dinput = dict(conv, op="Conv2DBackpropInput", out=[8, 32, 32, 3])
    assert gpu_kernels.expected_shape(dinput) == [8, 3, 33, 33]         # SAME's extra row, documented
    nchw = dict(conv, attrs={"data_format": "NCHW"}, out=[8, 24, 16, 16])
    assert gpu_kernels.expected_shape(nchw) == [8, 24, 16, 16]
    assert gpu_kernels.expected_shape({"op": "MatMul", "out": [5, 7]}) == [5, 7]
    assert gpu_kernels.expected_shape({"op": "ResourceApplyAdam", "out": None}) is None


def _node(graph, name, op, shape=None, **types):
    node = graph.node.add(name=name, op=op)
    if shape is not None:
        dims = node.attr["_output_shapes"].list.shape.add()
        if shape == "unknown":
            dims.unknown_rank = True
        for d in shape if shape != "unknown" else ():
            dims.dim.add(size=d)
    for key, value in types.items():
        node.attr[key].type = value
    return node


def test_output_shapes_fill_unknown_dims_from_the_step_stats_of_the_same_rank():
    g = GraphDef()
    x = _node(g, "x", "Placeholder", [-1, 256])
    loss = _node(g, "loss", "Mean", [8192])
    free = _node(g, "free", "Identity", "unknown")
    assert gpu_ops._output_shape(x, 0, {"x": [[64, 256]]}) == [64, 256]
    assert gpu_ops._output_shape(x, 0, {}) is None                       # still unknown
    assert gpu_ops._output_shape(loss, 0, {"loss": [[]]}) == [8192]      # a scalar of another rank is not it
    assert gpu_ops._output_shape(free, 0, {"free": [[3, 4]]}) == [3, 4]


def test_a_cast_is_typed_by_its_source_and_a_reduction_needs_const_axes():
    g = GraphDef()
    _node(g, "i", "Placeholder", [4], dtype=3)
    _node(g, "f", "Placeholder", [4, 5], dtype=1)
    cast = _node(g, "c", "Cast", [4], SrcT=3, DstT=1)
    cast.input.append("i")
    total = _node(g, "s", "Sum", [], T=1)
    total.input.extend(["f", "axes"])
    by_name = {n.name: n for n in g.node}
    assert gpu_ops.signature(cast, by_name, {}) == (None, "dtype")
    assert gpu_ops.signature(total, by_name, {}) == (None, "axes")
    axes = _node(g, "axes", "Const")
    axes.attr["value"].tensor.dtype = 3
    axes.attr["value"].tensor.int_val.extend([0, -1])
    axes.attr["value"].tensor.tensor_shape.dim.add(size=2)
    by_name["axes"] = axes
    sig, why = gpu_ops.signature(total, by_name, {})
    assert why is None and sig["ins"] == [[4, 5]] and sig["axes"] == [0, -1] and sig["out"] == []


def test_bad_input_is_one_line_and_exit_code_2(tmp_path, capsys):
    measured = tmp_path / "measured"
    measured.mkdir()
    (measured / "profile.json").write_text(json.dumps({"steps": 3}))
    assert gkt.main(["extract", str(measured), "-o", str(tmp_path / "o.json")]) == 2
    assert capsys.readouterr().err.strip().endswith("not an estimated profile (pardnn profile FAMILY --estimate PRESET)")
    other = tmp_path / "elsewhere" / "measured"
    other.mkdir(parents=True)
    assert gkt.main(["extract", str(measured), str(other), "-o", str(tmp_path / "o.json")]) == 2
    assert "two profile dirs named 'measured'" in capsys.readouterr().err
    times = tmp_path / "times.json"
    times.write_text(json.dumps({"times": []}))
    assert gkt.main(["compare", str(times), str(times)]) == 2           # the files swapped
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not this tool's file (no 'signatures'" in err
    assert not (tmp_path / "o.json").exists()


def test_the_csv_has_a_row_per_signature_and_profile(tmp_path):
    ops = {"commit": "commit x", "families": {},
           "signatures": [{"sig": {"op": "Sum", "dtype": "float32", "ins": [[4, 5]], "out": [5], "attrs": {},
                                   "axes": [0]}, "nodes": {"a": [3.0, 5.0], "b": [4.0]}},
                          {"sig": {"op": "Mul", "dtype": "float32", "ins": [[4], [4]], "out": [4], "attrs": {}},
                           "nodes": {"a": [6.0]}}]}
    times = {"device": "GPU", "torch": "2", "cudnn": 9,
             "times": [{"index": 0, "us": 2.0, "error": None}, {"index": 1, "us": None, "error": "x"}]}
    path = tmp_path / "k.csv"
    gkt.write_csv(ops, times, str(path))
    lines = path.read_text().splitlines()
    assert lines[0].startswith("# commit") and lines[1].startswith("# measured on GPU")
    rows = list(csv.DictReader(lines[2:]))
    assert [(r["signature"], r["profile"], r["nodes"], r["estimated_us"], r["measured_us"]) for r in rows] == [
        ("0", "a", "2", "4.0000", "2.0000"), ("0", "b", "1", "4.0000", "2.0000"), ("1", "a", "1", "6.0000", "")]
    assert json.loads(rows[0]["inputs"]) == [[4, 5]] and json.loads(rows[0]["axes"]) == [0]


def test_a_csv_gives_back_the_times_it_was_written_from(tmp_path):
    sig = {"op": "Sum", "dtype": "float32", "ins": [[4, 5]], "out": [5], "attrs": {"keep_dims": False},
           "axes": [0]}
    ops = {"commit": "commit x", "families": {},
           "signatures": [{"sig": sig, "nodes": {"a": [3.0]}},
                          {"sig": {**sig, "op": "Mean"}, "nodes": {"a": [6.0]}},
                          {"sig": {**sig, "axes": [1], "out": [4]}, "nodes": {"b": [1.0]}}]}
    times = {"device": "GPU", "torch": "2", "cudnn": 9,
             "times": [{"index": 0, "us": 2.5, "error": None}, {"index": 1, "us": None, "error": "x"},
                       {"index": 2, "us": 0.75, "error": None}]}
    path = tmp_path / "k.csv"
    gkt.write_csv(ops, times, str(path))
    other = dict(ops, signatures=[ops["signatures"][2], ops["signatures"][0], ops["signatures"][1]])
    back = gkt.read_times(str(path), other)          # another extraction's order: matched by signature
    assert [(t["index"], t["us"]) for t in back["times"]] == [(0, 0.75), (1, 2.5), (2, None)]
    assert back["device"] == "GPU (torch 2, cuDNN 9) (from k.csv)"

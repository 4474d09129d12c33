"""The estimator's per-op costs against kernel times measured on a real GPU.

    python tools/gpu_kernel_times.py extract PROFILE_DIR [...] -o ops.json   # here: what was estimated
    python tools/gpu_kernel_times.py time ops.json -o times.json             # on the GPU (PyTorch, CUDA)
    python tools/gpu_kernel_times.py compare ops.json times.json             # here: the tables

`extract` reads estimated profile dirs (`pardnn profile FAMILY --estimate PRESET`) and
groups their float ops into signatures: op type, input and output shapes, and the
attributes that change the kernel (transposes, strides, padding, axes), each with its
estimated time and how many nodes share it. `time` runs each signature's kernel on the
GPU and takes its time from a CUDA graph of REPEATS calls (no launch gaps), the median of
three replays; `compare` sets them side by side (docs/estimates.md, "Accuracy against a
GPU").

Why PyTorch: the GPU machines lent to this project have PyTorch and no TensorFlow, and
TensorFlow cannot be carried there (its wheel is hundreds of MB against the 64 MiB a
call may carry). The kernels are the libraries TensorFlow also calls (cuBLAS for the
matrix products, cuDNN for convolutions); element-wise ops, bias adds, reductions and
transposes are timed as one kernel of the same shapes (TensorFlow's Eigen kernels read
and write the same bytes). So this measures the per-op costs the placement uses, on the
chip; not TensorFlow's executor, and not a placed graph.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

from commit_line import commit_line  # noqa: E402

MATMUL = {"MatMul", "BatchMatMul", "BatchMatMulV2", "BatchMatMulV3"}
CONV = {"Conv2D", "Conv2DBackpropInput", "Conv2DBackpropFilter",
        "Conv3D", "Conv3DBackpropInputV2", "Conv3DBackpropFilterV2"}
UNARY = {"Relu", "Relu6", "Elu", "Tanh", "Sigmoid", "Exp", "Log", "Neg", "Sqrt", "Rsqrt", "Square",
         "Reciprocal", "Abs", "Sign", "Floor", "Erf", "Softplus", "Log1p", "Cast", "ZerosLike", "OnesLike"}
BINARY = {"Add", "AddV2", "Sub", "Mul", "RealDiv", "DivNoNan", "Maximum", "Minimum", "SquaredDifference",
          "ReluGrad", "Relu6Grad", "EluGrad", "TanhGrad", "SigmoidGrad", "RsqrtGrad", "SqrtGrad", "Pow",
          "FloorDiv", "BiasAdd", "AddN", "Greater", "GreaterEqual", "Less", "LessEqual", "Equal"}
REDUCE = {"Sum", "Mean", "Max", "Min", "Prod"}
OTHER = {"Softmax", "LogSoftmax", "BiasAddGrad", "Transpose", "ResourceApplyAdam", "SelectV2", "Select"}
FLOAT_TYPES = {1: "float32", 19: "float16", 14: "bfloat16"}
REPEATS = 20
DEVICE = "cuda"


# ---- extract (no GPU) ------------------------------------------------------------------

def _shape(proto):
    return None if proto.unknown_rank else [d.size for d in proto.dim]


def _const_ints(node):
    """The int values of a Const node, or None."""
    if node is None or node.op != "Const":
        return None
    t = node.attr["value"].tensor
    if t.tensor_content:
        dtype = np.int64 if t.dtype == 9 else np.int32
        return np.frombuffer(t.tensor_content, dtype).tolist()
    vals = list(t.int64_val) or list(t.int_val)
    dims = [d.size for d in t.tensor_shape.dim]
    return vals * int(np.prod(dims)) if len(vals) == 1 and dims else vals


def _attrs(node):
    out = {}
    for key in ("transpose_a", "transpose_b", "adj_x", "adj_y", "keep_dims"):
        if key in node.attr:
            out[key] = bool(node.attr[key].b)
    for key in ("strides", "dilations"):
        if key in node.attr:
            out[key] = list(node.attr[key].list.i)
    for key in ("padding", "data_format"):
        if key in node.attr:
            out[key] = node.attr[key].s.decode()
    return out


def _run_shapes(path):
    """node name -> its output shapes as the profile's step stats give them (the shapes
    Grappler inferred with the fed batch, where the GraphDef says only None)."""
    from pardnn.tf.protos import RunMetadata
    meta = RunMetadata()
    with open(os.path.join(path, "run_metadata_0.pb"), "rb") as f:
        meta.ParseFromString(f.read())
    return {ns.node_name: [[d.size for d in out.tensor_description.shape.dim] for out in ns.output]
            for dev in meta.step_stats.dev_stats for ns in dev.node_stats}


def _output_shape(node, port, run_shapes):
    """Output `port` of `node`: from the step stats when known there, else `_output_shapes`."""
    ran = run_shapes.get(node.name, ())
    if port < len(ran) and all(d >= 0 for d in ran[port]):
        return ran[port]
    shapes = node.attr["_output_shapes"].list.shape if "_output_shapes" in node.attr else ()
    return _shape(shapes[port]) if port < len(shapes) else None


def signature(node, by_name, run_shapes):
    """(signature dict, None) for a measurable node, or (None, reason)."""
    op = node.op
    if op not in MATMUL | CONV | UNARY | BINARY | REDUCE | OTHER:
        return None, "op"
    dtype = node.attr["T"].type if "T" in node.attr else 1
    if dtype not in FLOAT_TYPES:
        return None, "dtype"
    ins, consts = [], []
    for ref in node.input:
        if ref.startswith("^"):
            continue
        name, _, port = ref.partition(":")
        src = by_name.get(name)
        ins.append(None if src is None else _output_shape(src, int(port or 0), run_shapes))
        consts.append(_const_ints(src))
    out = _output_shape(node, 0, run_shapes)
    sig = {"op": op, "dtype": FLOAT_TYPES[dtype], "out": out, "attrs": _attrs(node)}
    if op in REDUCE or op == "Transpose":
        sig["ins"], sig["axes"] = ins[:1], consts[1] if len(consts) > 1 else None
        if sig["axes"] is None:
            return None, "axes"
    elif op == "ResourceApplyAdam":
        sig["ins"] = [ins[9]] if len(ins) > 9 else [None]
    elif op in ("Conv2DBackpropInput", "Conv3DBackpropInputV2"):
        sig["ins"] = [out, ins[1], ins[2]]
    elif op in ("Conv2DBackpropFilter", "Conv3DBackpropFilterV2"):
        sig["ins"] = [ins[0], out, ins[2]]
    else:
        sig["ins"] = ins
    shapes = sig["ins"] + ([out] if op != "ResourceApplyAdam" else [])
    if any(s is None or any(d < 0 for d in s) for s in shapes):
        return None, "shape"
    return sig, None


def extract(dirs) -> dict:
    """The float ops of estimated profile dirs, grouped by signature."""
    from pardnn.pipeline.load import load_cost_graph
    from pardnn.tf.graphdef import read_graph_def
    sigs, skipped, families = {}, {}, {}
    for path in dirs:
        family = os.path.basename(os.path.normpath(path))
        with open(os.path.join(path, "profile.json")) as f:
            costs = json.load(f).get("costs") or {}
        if costs.get("source") != "estimated":
            raise SystemExit(f"{path}: not an estimated profile (pardnn profile FAMILY --estimate PRESET)")
        graph, _ = load_cost_graph(path)
        est = dict(zip(graph.names, graph.comp_us.tolist()))
        by_name = {n.name: n for n in read_graph_def(os.path.join(path, "graph.pb")).node}
        run_shapes = _run_shapes(path)
        families[family] = {"target": costs.get("target"), "precision": costs.get("precision"),
                            "op_overhead_us": costs.get("op_overhead_us"), "nodes": graph.num_nodes,
                            "est_total_us": float(graph.comp_us.sum())}
        for name, us in est.items():
            if us == 0:
                continue            # not run in the step (initializers): the profile timed nothing
            node = by_name.get(name)
            sig, why = (None, "not in graph.pb") if node is None else signature(node, by_name, run_shapes)
            if sig is None:
                key = (family, node.op if node is not None else "?", why)
                skipped[key] = skipped.get(key, 0.0) + us
                continue
            key = json.dumps(sig, sort_keys=True)
            entry = sigs.setdefault(key, {"sig": sig, "nodes": {}})
            entry["nodes"].setdefault(family, []).append(us)
    return {"commit": commit_line(), "families": families, "signatures": list(sigs.values()),
            "skipped": [{"family": f, "op": o, "why": w, "est_us": u} for (f, o, w), u in skipped.items()]}


# ---- time (on the GPU, PyTorch) ---------------------------------------------------------

def _conv_padding(sig, spatial):
    """TF's SAME/VALID padding as (pads, extra) per spatial dim: torch pads both ends by
    `pads`; TF pads an odd total one more at the end, so the input is made `extra` (0 or
    1) longer there, which gives TF's output shapes and work exactly."""
    if sig["attrs"].get("padding") != "SAME":
        return [0] * spatial, [0] * spatial
    x, w = sig["ins"][0], sig["ins"][1]
    nhwc = not sig["attrs"].get("data_format", "NHWC").startswith("NC")
    dims = x[1:1 + spatial] if nhwc else x[2:2 + spatial]
    strides = _spatial(sig["attrs"].get("strides"), spatial, nhwc)
    dil = _spatial(sig["attrs"].get("dilations"), spatial, nhwc)
    totals = [max((math.ceil(dims[i] / strides[i]) - 1) * strides[i] + (w[i] - 1) * dil[i] + 1 - dims[i], 0)
              for i in range(spatial)]
    return [t // 2 for t in totals], [t % 2 for t in totals]


def _spatial(values, spatial, nhwc):
    if not values:
        return [1] * spatial
    return values[1:1 + spatial] if nhwc else values[2:2 + spatial]


def _conv_fn(torch, sig, new):
    """The convolution (or a gradient of it) of `sig` in channels-last layout."""
    op, attrs = sig["op"], sig["attrs"]
    spatial = 3 if "3D" in op else 2
    nhwc = not attrs.get("data_format", "NHWC").startswith("NC")
    fmt = torch.channels_last_3d if spatial == 3 else torch.channels_last
    x_shape, w_shape, *y_shape = sig["ins"]
    to_nc = (lambda s: [s[0], s[-1], *s[1:-1]]) if nhwc else list
    pad, extra = _conv_padding(sig, spatial)
    x_nc = to_nc(x_shape)
    x = new(x_nc[:2] + [d + e for d, e in zip(x_nc[2:], extra)]).to(memory_format=fmt)
    w = new([w_shape[-1], w_shape[-2], *w_shape[:spatial]]).to(memory_format=fmt)   # HWIO -> OIHW
    stride = _spatial(attrs.get("strides"), spatial, nhwc)
    dil = _spatial(attrs.get("dilations"), spatial, nhwc)
    conv = torch.nn.functional.conv3d if spatial == 3 else torch.nn.functional.conv2d
    grad = torch.nn.grad
    if op.startswith("Conv2DBackpropInput") or op.startswith("Conv3DBackpropInput"):
        g = new(to_nc(y_shape[0])).to(memory_format=fmt)
        fn = grad.conv3d_input if spatial == 3 else grad.conv2d_input
        return lambda: fn(x.shape, w, g, stride, pad, dil)
    if "BackpropFilter" in op:
        g = new(to_nc(y_shape[0])).to(memory_format=fmt)
        fn = grad.conv3d_weight if spatial == 3 else grad.conv2d_weight
        return lambda: fn(x, w.shape, g, stride, pad, dil)
    return lambda: conv(x, w, None, stride, pad, dil)


def kernel_fn(torch, sig):
    """A zero-argument callable running `sig`'s kernel on the GPU."""
    dtype = getattr(torch, sig["dtype"])
    op, attrs, ins = sig["op"], sig["attrs"], sig["ins"]

    def new(shape):
        return torch.randn(shape, device=DEVICE, dtype=dtype)
    if op == "MatMul":
        a, b = new(ins[0]), new(ins[1])
        return lambda: torch.mm(a.t() if attrs.get("transpose_a") else a, b.t() if attrs.get("transpose_b") else b)
    if op in MATMUL:
        a, b = new(ins[0]), new(ins[1])
        return lambda: torch.matmul(a.mT if attrs.get("adj_x") else a, b.mT if attrs.get("adj_y") else b)
    if op in CONV:
        return _conv_fn(torch, sig, new)
    if op in UNARY:
        x = new(ins[0])
        out = torch.empty_like(x)
        return lambda: torch.neg(x, out=out)
    if op in BINARY:
        if op == "BiasAdd" and attrs.get("data_format", "NHWC").startswith("NC"):
            x, b = new(ins[0]), new([ins[1][0]] + [1] * (len(ins[0]) - 2))
        else:
            x, b = new(ins[0]), new(ins[1])
        if op == "AddN" and len(ins) > 2:
            rest = [new(s) for s in ins[2:]]
            return lambda: torch.stack([x, b, *rest]).sum(0)
        out = torch.empty(sig["out"], device=DEVICE, dtype=dtype)
        return lambda: torch.add(x, b, out=out)
    if op in REDUCE:
        x = new(ins[0])
        axes = [a % max(len(ins[0]), 1) for a in sig["axes"]] or list(range(len(ins[0])))
        keep = attrs.get("keep_dims", False)
        reduce = {"Sum": torch.sum, "Mean": torch.mean, "Prod": torch.prod}.get(op)
        if reduce is None:
            return lambda: torch.amax(x, dim=axes, keepdim=keep)
        return lambda: reduce(x, dim=axes, keepdim=keep)
    if op in ("Softmax", "LogSoftmax"):
        x = new(ins[0])
        fn = torch.softmax if op == "Softmax" else torch.log_softmax
        return lambda: fn(x, -1)
    if op == "BiasAddGrad":
        x = new(ins[0])
        channel = 1 if attrs.get("data_format", "NHWC").startswith("NC") else len(ins[0]) - 1
        dims = [d for d in range(len(ins[0])) if d != channel]
        return lambda: torch.sum(x, dim=dims)
    if op == "Transpose":
        x = new(ins[0])
        return lambda: x.permute(sig["axes"]).contiguous()
    if op in ("SelectV2", "Select"):
        c = new(ins[0]) > 0
        a, b = new(ins[1]), new(ins[2])
        return lambda: torch.where(c, a, b)
    if op == "ResourceApplyAdam":
        p = torch.nn.Parameter(new(ins[0]))
        p.grad = new(ins[0])
        opt = torch.optim.Adam([p], lr=1e-4, fused=True, capturable=True)   # one fused kernel
        opt.step()              # the state (moments) exists before the graph is captured
        return opt.step
    raise ValueError(op)


def time_kernel(torch, fn) -> float:
    """Microseconds per call: REPEATS calls (3 for a kernel over a millisecond) captured in
    a CUDA graph, the median of three replays."""
    repeats = REPEATS if _once_us(torch, fn) < 1000 else 3
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn()
        with torch.cuda.graph(graph, stream=stream):
            for _ in range(repeats):
                fn()
    torch.cuda.synchronize()
    return float(np.median([_once_us(torch, graph.replay) / repeats for _ in range(3)]))


def _once_us(torch, fn) -> float:
    """GPU microseconds between events around one call of `fn`."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1e3


def eager_overhead_us(torch) -> float:
    """Wall time per call of a one-element add issued eagerly in a loop: what the
    framework and the launch cost per op when the kernel itself is nothing."""
    x = torch.zeros(1, device="cuda")
    for _ in range(100):
        torch.add(x, x)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(2000):
        torch.add(x, x)
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / 2000 * 1e6


def run_time(ops_path, out_path, budget_s):
    import torch
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    torch.backends.cudnn.benchmark = True
    with open(ops_path) as f:
        ops = json.load(f)
    t_start = time.perf_counter()
    results = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
               "cudnn": torch.backends.cudnn.version(), "eager_overhead_us": eager_overhead_us(torch),
               "repeats": REPEATS, "times": []}
    order = sorted(range(len(ops["signatures"])), key=lambda i: -_est_weight(ops["signatures"][i]))
    for done, i in enumerate(order):
        if time.perf_counter() - t_start > budget_s:
            results["stopped_after"] = done
            break
        sig = ops["signatures"][i]["sig"]
        try:
            us, error = time_kernel(torch, kernel_fn(torch, sig)), None
        except (RuntimeError, ValueError, TypeError) as exc:
            us, error = None, f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
        results["times"].append({"index": i, "us": us, "error": error})
        torch.cuda.empty_cache()
        if done % 50 == 0:
            print(f"{done}/{len(order)} signatures, {time.perf_counter() - t_start:.0f} s", flush=True)
    tmp = out_path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(results, f)
    os.replace(tmp, out_path)
    print(f"timed {len(results['times'])} signatures in {time.perf_counter() - t_start:.0f} s on "
          f"{results['device']}; eager overhead {results['eager_overhead_us']:.1f} us per op")


def _est_weight(entry) -> float:
    return sum(sum(v) for v in entry["nodes"].values())


# ---- compare (no GPU) ---------------------------------------------------------------------

def _ranks(values):
    order = np.argsort(values, kind="stable")
    ranks = np.empty(len(values))
    ranks[order] = np.arange(len(values))
    sorted_v = np.asarray(values)[order]          # ties share their mean rank
    start = 0
    for end in range(1, len(values) + 1):
        if end == len(values) or sorted_v[end] != sorted_v[start]:
            ranks[order[start:end]] = (start + end - 1) / 2
            start = end
    return ranks


def spearman(a, b) -> float:
    if len(a) < 3:
        return float("nan")
    return float(np.corrcoef(_ranks(a), _ranks(b))[0, 1])


def flops(sig) -> float:
    """Multiply-adds x 2 of a matrix product or convolution signature (0 for other ops)."""
    op, attrs, ins = sig["op"], sig["attrs"], sig["ins"]
    if op == "MatMul":
        return 2.0 * math.prod(sig["out"]) * ins[0][0 if attrs.get("transpose_a") else 1]
    if op in MATMUL:
        return 2.0 * math.prod(sig["out"]) * ins[0][-2 if attrs.get("adj_x") else -1]
    if op in CONV:           # every output element of the forward conv: kernel volume x in-channels
        forward_out = sig["out"] if op in ("Conv2D", "Conv3D") else ins[2]
        return 2.0 * math.prod(forward_out) * math.prod(ins[1][:-1])
    return 0.0


def rows(ops, times):
    """Per node: (family, op, estimated us, measured us)."""
    measured = {t["index"]: t["us"] for t in times["times"] if t["us"] is not None}
    out = []
    for i, entry in enumerate(ops["signatures"]):
        if i in measured:
            for family, ests in entry["nodes"].items():
                out.extend((family, entry["sig"]["op"], e, measured[i]) for e in ests)
    return out


def compare(ops, times):
    print(f"ops: {ops['commit']}; measured on {times['device']} (torch {times['torch']}, cuDNN "
          f"{times['cudnn']}), up to {times['repeats']} calls per CUDA graph; eager launch "
          f"{times['eager_overhead_us']:.1f} us per op")
    data = rows(ops, times)
    print("\n| profile | nodes | measured nodes | their share of the estimate | Spearman | estimate / measured "
          "| without the per-op overhead | median ratio, ops under 10 us |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for family, info in ops["families"].items():
        mine = [r for r in data if r[0] == family]
        if not mine:
            continue
        est = np.array([r[2] for r in mine])
        meas = np.array([r[3] for r in mine])
        over = info["op_overhead_us"] or 0.0
        small = meas < 10
        print(f"| {family} | {info['nodes']} | {len(mine)} | {est.sum() / info['est_total_us']:.0%} | "
              f"{spearman(est, meas):.2f} | {est.sum() / meas.sum():.2f} | "
              f"{np.maximum(est - over, 0).sum() / meas.sum():.2f} | "
              f"{np.median(est[small] / meas[small]) if small.any() else float('nan'):.2f} |")
    print("\n| op | nodes | share of measured time | estimate / measured (sums) | median per node |")
    print("|---|---:|---:|---:|---:|")
    total = sum(r[3] for r in data)
    by_op = {}
    for _, op, e, m in data:
        by_op.setdefault(op, []).append((e, m))
    for op, pairs in sorted(by_op.items(), key=lambda kv: -sum(m for _, m in kv[1]))[:15]:
        e, m = np.array(pairs).T
        print(f"| {op} | {len(pairs)} | {m.sum() / total:.1%} | {e.sum() / m.sum():.2f} | {np.median(e / m):.2f} |")
    print("\n| op | TFLOP/s measured | TFLOP/s estimated (with the per-op overhead) |")
    print("|---|---:|---:|")
    measured = {t["index"]: t["us"] for t in times["times"] if t["us"] is not None}
    work = {}
    for i, entry in enumerate(ops["signatures"]):
        f = flops(entry["sig"])
        if f and i in measured:
            ests = [e for v in entry["nodes"].values() for e in v]
            w = work.setdefault(entry["sig"]["op"], [0.0, 0.0, 0.0])
            w[0] += f * len(ests)
            w[1] += measured[i] * len(ests)
            w[2] += sum(ests)
    for op, (f, meas, est) in sorted(work.items()):
        print(f"| {op} | {f / meas / 1e6:.0f} | {f / est / 1e6:.0f} |")
    errors = [t for t in times["times"] if t["error"]]
    if errors:
        print(f"\n{len(errors)} signatures failed to run, e.g. {errors[0]['error']}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("extract")
    e.add_argument("dirs", nargs="+")
    e.add_argument("-o", "--output", required=True)
    t = sub.add_parser("time")
    t.add_argument("ops")
    t.add_argument("-o", "--output", required=True)
    t.add_argument("--budget-s", type=float, default=400.0, help="stop timing new signatures after this")
    c = sub.add_parser("compare")
    c.add_argument("ops")
    c.add_argument("times")
    args = ap.parse_args(argv)
    if args.cmd == "extract":
        ops = extract(args.dirs)
        with open(args.output, "w") as f:
            json.dump(ops, f)
        n = sum(len(v) for s in ops["signatures"] for v in s["nodes"].values())
        print(f"{len(ops['signatures'])} signatures over {n} nodes -> {args.output}")
    elif args.cmd == "time":
        run_time(args.ops, args.output, args.budget_s)
    else:
        with open(args.ops) as f1, open(args.times) as f2:
            compare(json.load(f1), json.load(f2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Estimated ops as kernel signatures, for tools/gpu_kernel_times.py: each float op
of an estimated profile (`pardnn profile FAMILY --estimate PRESET`) that ran in the step,
as its op type, input and output shapes and the attributes that choose the kernel or its
work (transposes, strides, padding, axes), with its estimated time. Reads protobufs
only: no TensorFlow."""

from __future__ import annotations

import json
import math
import os

import numpy as np

from tools.commit_line import commit_line

MATMUL = {"MatMul", "BatchMatMul", "BatchMatMulV2", "BatchMatMulV3"}
CONV = {"Conv2D", "Conv2DBackpropInput", "Conv2DBackpropFilter",
        "Conv3D", "Conv3DBackpropInputV2", "Conv3DBackpropFilterV2"}
UNARY = {"Relu", "Relu6", "Elu", "Tanh", "Sigmoid", "Exp", "Log", "Neg", "Sqrt", "Rsqrt", "Square",
         "Reciprocal", "Abs", "Sign", "Floor", "Erf", "Softplus", "Log1p", "Cast", "ZerosLike", "OnesLike"}
BINARY = {"Add", "AddV2", "Sub", "Mul", "RealDiv", "DivNoNan", "Maximum", "Minimum", "SquaredDifference",
          "ReluGrad", "Relu6Grad", "EluGrad", "TanhGrad", "SigmoidGrad", "RsqrtGrad", "SqrtGrad", "Pow",
          "FloorDiv", "BiasAdd", "AddN"}
COMPARE = {"Greater", "GreaterEqual", "Less", "LessEqual", "Equal", "NotEqual"}
REDUCE = {"Sum", "Mean", "Max", "Min", "Prod"}
OTHER = {"Softmax", "LogSoftmax", "BiasAddGrad", "Transpose", "ResourceApplyAdam", "SelectV2", "Select"}
MEASURED = MATMUL | CONV | UNARY | BINARY | COMPARE | REDUCE | OTHER
FLOAT_TYPES = {1: "float32", 19: "float16", 14: "bfloat16"}



class ToolError(Exception):
    """Bad input to this tool: one line on stderr, exit code 2."""


def _shape(proto):
    """A TensorShapeProto as a list (-1: unknown dimension), None for unknown rank."""
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
    """The attributes that choose the kernel or its work."""
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
    """Output `port` of `node`: the GraphDef's static shape (`_output_shapes`) with its
    unknown dimensions taken from the step stats when they have the same rank; None if
    still unknown."""
    shapes = node.attr["_output_shapes"].list.shape if "_output_shapes" in node.attr else ()
    static = _shape(shapes[port]) if port < len(shapes) else None
    ran = run_shapes.get(node.name, ())
    ran = ran[port] if port < len(ran) else None
    if ran is not None and all(d >= 0 for d in ran) and (static is None or len(static) == len(ran)):
        return ran
    return static if static is not None and all(d >= 0 for d in static) else None


def _dtype(node):
    """The node's float type name, or None (Cast is typed by its source)."""
    key = "SrcT" if node.op == "Cast" else "T"
    return FLOAT_TYPES.get(node.attr[key].type if key in node.attr else 1)


def signature(node, by_name, run_shapes):
    """(signature dict, None) for a measurable node, or (None, reason)."""
    op = node.op
    if op not in MEASURED:
        return None, "op"
    dtype = _dtype(node)
    if dtype is None:
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
    sig = {"op": op, "dtype": dtype, "out": out, "attrs": _attrs(node), "ins": _inputs(op, ins, out)}
    if op in REDUCE or op == "Transpose":
        sig["axes"] = consts[1] if len(consts) > 1 else None
        if sig["axes"] is None:
            return None, "axes"
    shapes = sig["ins"] + ([out] if op != "ResourceApplyAdam" else [])
    if any(s is None for s in shapes):
        return None, "shape"
    return sig, None


def _inputs(op, ins, out):
    """The input shapes the kernel needs: a gradient's shape-argument replaced by the
    output it gives, Adam's variable by its gradient (input 9), a reduction's and a
    transpose's axes dropped (kept apart as `axes`)."""
    if op in REDUCE or op == "Transpose":
        return ins[:1]
    if op == "ResourceApplyAdam":
        return [ins[9] if len(ins) > 9 else None]
    if op in ("Conv2DBackpropInput", "Conv3DBackpropInputV2"):
        return [out, *ins[1:3]]
    if op in ("Conv2DBackpropFilter", "Conv3DBackpropFilterV2"):
        return [ins[0], out, *ins[2:3]]
    return ins


def extract(dirs) -> dict:
    """The float ops of estimated profile dirs, grouped by signature; each dir is a
    family, named by its last path component."""
    names = [os.path.basename(os.path.normpath(path)) for path in dirs]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ToolError(f"two profile dirs named {twice[0]!r}: each dir names a family, so give distinct names")
    sigs, skipped, families = {}, {}, {}
    for family, path in zip(names, dirs):
        families[family], est, by_name, run_shapes = _read_profile(path)
        for name, us in est.items():
            if us == 0:
                continue            # not run in the step (initializers): the profile timed nothing
            node = by_name.get(name)
            sig, why = (None, "not in graph.pb") if node is None else signature(node, by_name, run_shapes)
            if sig is None:
                key = (family, node.op if node is not None else "?", why)
                skipped[key] = skipped.get(key, 0.0) + us
                continue
            entry = sigs.setdefault(json.dumps(sig, sort_keys=True), {"sig": sig, "nodes": {}})
            entry["nodes"].setdefault(family, []).append(us)
    return {"commit": commit_line(), "families": families, "signatures": list(sigs.values()),
            "skipped": [{"family": f, "op": o, "why": w, "est_us": u} for (f, o, w), u in skipped.items()]}


def _read_profile(path):
    """(family info, node name -> estimated us, node name -> NodeDef, step-stats shapes)."""
    from pardnn.base.errors import UserError
    from pardnn.pipeline.load import load_cost_graph
    from pardnn.tf.graphdef import read_graph_def
    try:
        with open(os.path.join(path, "profile.json")) as f:
            costs = json.load(f).get("costs") or {}
        if costs.get("source") != "estimated":
            raise ToolError(f"{path}: not an estimated profile (pardnn profile FAMILY --estimate PRESET)")
        graph, _ = load_cost_graph(path)
        by_name = {n.name: n for n in read_graph_def(os.path.join(path, "graph.pb")).node}
        run_shapes = _run_shapes(path)
    except (OSError, ValueError) as exc:
        raise ToolError(f"{path}: cannot read the profile ({exc})") from None
    except UserError as exc:
        raise ToolError(str(exc)) from None
    info = {"target": costs.get("target"), "precision": costs.get("precision"),
            "op_overhead_us": costs.get("op_overhead_us"), "nodes": graph.num_nodes,
            "est_total_us": float(graph.comp_us.sum())}
    return info, dict(zip(graph.names, graph.comp_us.tolist())), by_name, run_shapes


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

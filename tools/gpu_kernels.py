"""Kernels of estimated-op signatures (tools/gpu_ops.py) run and timed on a GPU with
PyTorch, for tools/gpu_kernel_times.py's `time`.

The kernels are the libraries TensorFlow also calls: cuBLAS for the matrix products,
cuDNN for convolutions (in NCHW, as TensorFlow's layout optimizer runs FP32
convolutions on a GPU; channels-last for FP16/BF16); element-wise ops, bias adds,
reductions and transposes run as one kernel of the same shapes (TensorFlow's Eigen
kernels read and write the same bytes). Each kernel's output is checked against
TensorFlow's shape before it is timed."""

from __future__ import annotations

import math
import time

import numpy as np

from tools.gpu_ops import COMPARE, CONV, MATMUL, REDUCE, UNARY, BINARY, ToolError

REPEATS = 20
DEVICE = "cuda"


def _nhwc(sig) -> bool:
    return not sig["attrs"].get("data_format", "NHWC").startswith("NC")


def _spatial(values, spatial, nhwc):
    """The spatial entries of a TF strides/dilations list (1s when absent)."""
    if not values:
        return [1] * spatial
    return values[1:1 + spatial] if nhwc else values[2:2 + spatial]


def _conv_padding(sig, spatial):
    """TF's SAME/VALID padding as (pads, extra) per spatial dim: torch pads both ends by
    `pads`; TF pads an odd total one more at the end, so the input is made `extra` (0 or
    1) longer there, which gives TF's output shapes and work exactly (an input gradient
    then has that extra row too)."""
    if sig["attrs"].get("padding") != "SAME":
        return [0] * spatial, [0] * spatial
    x, w = sig["ins"][0], sig["ins"][1]
    nhwc = _nhwc(sig)
    dims = x[1:1 + spatial] if nhwc else x[2:2 + spatial]
    strides = _spatial(sig["attrs"].get("strides"), spatial, nhwc)
    dil = _spatial(sig["attrs"].get("dilations"), spatial, nhwc)
    totals = [max((math.ceil(dims[i] / strides[i]) - 1) * strides[i] + (w[i] - 1) * dil[i] + 1 - dims[i], 0)
              for i in range(spatial)]
    return [t // 2 for t in totals], [t % 2 for t in totals]


def _to_nc(shape, nhwc):
    """A TF activation shape in torch's logical order (batch, channels, spatial...)."""
    return [shape[0], shape[-1], *shape[1:-1]] if nhwc else list(shape)


def expected_shape(sig):
    """The shape the torch kernel of `sig` must return (TF's output in torch's order), or
    None where there is nothing to check (the optimizer step)."""
    op, out = sig["op"], sig["out"]
    if op == "ResourceApplyAdam":
        return None
    if op in CONV:
        spatial = 3 if "3D" in op else 2
        if "BackpropFilter" in op:
            return [out[-1], out[-2], *out[:spatial]]         # HWIO -> OIHW
        shape = _to_nc(out, _nhwc(sig))
        if "BackpropInput" in op:
            extra = _conv_padding(sig, spatial)[1]
            shape = shape[:2] + [d + e for d, e in zip(shape[2:], extra)]
        return shape
    return list(out)


def _conv_fn(torch, sig, new):
    """The convolution (or a gradient of it) of `sig`, in NCHW for FP32 (what TensorFlow's
    layout optimizer gives FP32 convolutions on a GPU), channels-last for FP16/BF16."""
    op, attrs = sig["op"], sig["attrs"]
    spatial = 3 if "3D" in op else 2
    nhwc = _nhwc(sig)
    last = torch.channels_last_3d if spatial == 3 else torch.channels_last
    fmt = torch.contiguous_format if sig["dtype"] == "float32" else last
    pad, extra = _conv_padding(sig, spatial)
    x_nc = _to_nc(sig["ins"][0], nhwc)
    x = new(x_nc[:2] + [d + e for d, e in zip(x_nc[2:], extra)]).to(memory_format=fmt)
    w_tf = sig["ins"][1]
    w = new([w_tf[-1], w_tf[-2], *w_tf[:spatial]]).to(memory_format=fmt)      # HWIO -> OIHW
    stride = _spatial(attrs.get("strides"), spatial, nhwc)
    dil = _spatial(attrs.get("dilations"), spatial, nhwc)
    grad = torch.nn.grad
    if "BackpropInput" in op:
        g = new(_to_nc(sig["ins"][2], nhwc)).to(memory_format=fmt)
        fn = grad.conv3d_input if spatial == 3 else grad.conv2d_input
        return lambda: fn(x.shape, w, g, stride, pad, dil)
    if "BackpropFilter" in op:
        g = new(_to_nc(sig["ins"][2], nhwc)).to(memory_format=fmt)
        fn = grad.conv3d_weight if spatial == 3 else grad.conv2d_weight
        return lambda: fn(x, w.shape, g, stride, pad, dil)
    conv = torch.nn.functional.conv3d if spatial == 3 else torch.nn.functional.conv2d
    return lambda: conv(x, w, None, stride, pad, dil)


def _matmul_fn(torch, sig, new):
    a, b = new(sig["ins"][0]), new(sig["ins"][1])
    attrs = sig["attrs"]
    if sig["op"] == "MatMul":
        return lambda: torch.mm(a.t() if attrs.get("transpose_a") else a, b.t() if attrs.get("transpose_b") else b)
    return lambda: torch.matmul(a.mT if attrs.get("adj_x") else a, b.mT if attrs.get("adj_y") else b)


def _elementwise_fn(torch, sig, new):
    """One kernel reading each input once and writing the output: TF's Eigen kernel's
    traffic. AddN of n inputs sums them once (stacked outside the timed call)."""
    op, ins = sig["op"], sig["ins"]
    if op in UNARY:
        x = new(ins[0])
        out = torch.empty_like(x)
        return lambda: torch.neg(x, out=out)
    if op == "AddN" and len(ins) > 2:
        stacked = new([len(ins), *ins[0]])
        return lambda: stacked.sum(0)
    if op == "BiasAdd" and not _nhwc(sig):
        x, b = new(ins[0]), new([ins[1][0]] + [1] * (len(ins[0]) - 2))
    else:
        x, b = new(ins[0]), new(ins[1])
    if op in COMPARE:
        out = torch.empty(sig["out"], device=DEVICE, dtype=torch.bool)
        return lambda: torch.gt(x, b, out=out)
    out = torch.empty(sig["out"], device=DEVICE, dtype=x.dtype)
    return lambda: torch.add(x, b, out=out)


def _reduce_fn(torch, sig, new):
    """A reduction over the const axes (none: TF copies the input). Max, Min and Prod run
    as torch's amax: one pass over the same bytes, as each of TF's does."""
    x = new(sig["ins"][0])
    rank = len(sig["ins"][0])
    axes = sorted({a % rank for a in sig["axes"]}) if rank else []
    if not axes:
        return lambda: x.clone()
    keep = sig["attrs"].get("keep_dims", False)
    reduce = {"Sum": torch.sum, "Mean": torch.mean}.get(sig["op"], torch.amax)
    return lambda: reduce(x, dim=axes, keepdim=keep)


def _other_fn(torch, sig, new):
    op, ins = sig["op"], sig["ins"]
    if op in ("Softmax", "LogSoftmax"):
        x = new(ins[0])
        fn = torch.softmax if op == "Softmax" else torch.log_softmax
        return lambda: fn(x, -1)
    if op == "BiasAddGrad":
        x = new(ins[0])
        channel = len(ins[0]) - 1 if _nhwc(sig) else 1
        dims = [d for d in range(len(ins[0])) if d != channel]
        return lambda: torch.sum(x, dim=dims)
    if op == "Transpose":
        x = new(ins[0])
        return lambda: x.permute(sig["axes"]).contiguous()
    if op in ("SelectV2", "Select"):
        c = new(ins[0]) > 0
        a, b = new(ins[1]), new(ins[2])
        return lambda: torch.where(c, a, b)
    p = torch.nn.Parameter(new(ins[0]))             # ResourceApplyAdam
    p.grad = new(ins[0])
    opt = torch.optim.Adam([p], lr=1e-4, fused=True, capturable=True)     # one fused kernel
    opt.step()              # the state (moments) exists before the graph is captured
    return opt.step


def kernel_fn(torch, sig):
    """A zero-argument callable running `sig`'s kernel on DEVICE."""
    dtype = getattr(torch, sig["dtype"])

    def new(shape):
        return torch.randn(shape, device=DEVICE, dtype=dtype)
    op = sig["op"]
    if op in MATMUL:
        return _matmul_fn(torch, sig, new)
    if op in CONV:
        return _conv_fn(torch, sig, new)
    if op in UNARY | BINARY | COMPARE:
        return _elementwise_fn(torch, sig, new)
    if op in REDUCE:
        return _reduce_fn(torch, sig, new)
    return _other_fn(torch, sig, new)


def time_kernel(torch, fn) -> float:
    """Microseconds per call: REPEATS calls (3 for a kernel over a millisecond, timed
    warm) captured in a CUDA graph, the median of three replays."""
    fn()                    # cuDNN's algorithm search and lazy setup happen here
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


def measure(torch, sig):
    """(microseconds, None), or (None, why) when the kernel fails or its output does
    not have TensorFlow's shape."""
    try:
        fn = kernel_fn(torch, sig)
        expected = expected_shape(sig)
        got = fn()
        if expected is not None and list(got.shape) != expected:
            return None, f"shape {list(got.shape)}, TensorFlow's is {expected}"
        return time_kernel(torch, fn), None
    except (RuntimeError, ValueError, TypeError) as exc:
        return None, f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"


def run_time(ops, budget_s, dtype=None) -> dict:
    """Time every signature of the extracted `ops`, heaviest estimate first, until
    `budget_s` seconds have passed, in `dtype` if given (float16 or bfloat16: the ops as
    a mixed-precision step runs them) instead of each signature's own: {"device", "torch",
    "cudnn", "eager_overhead_us", "repeats", "dtype", "times": [{"index", "us", "error"}],
    "stopped_after" if the budget ended it}."""
    try:
        import torch
    except ImportError:
        raise ToolError("time: needs PyTorch with CUDA (run it on a GPU machine)") from None
    if not torch.cuda.is_available():
        raise ToolError("time: PyTorch sees no CUDA device")
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    torch.backends.cudnn.benchmark = True
    t_start = time.perf_counter()
    results = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
               "cudnn": torch.backends.cudnn.version(), "eager_overhead_us": eager_overhead_us(torch),
               "repeats": REPEATS, "dtype": dtype, "times": []}
    order = sorted(range(len(ops["signatures"])), key=lambda i: -_est_weight(ops["signatures"][i]))
    for done, i in enumerate(order):
        if time.perf_counter() - t_start > budget_s:
            results["stopped_after"] = done
            break
        sig = ops["signatures"][i]["sig"]
        us, error = measure(torch, dict(sig, dtype=dtype) if dtype else sig)
        results["times"].append({"index": i, "us": us, "error": error})
        torch.cuda.empty_cache()
        if done % 50 == 0:
            print(f"{done}/{len(order)} signatures, {time.perf_counter() - t_start:.0f} s", flush=True)
    print(f"timed {len(results['times'])} signatures in {time.perf_counter() - t_start:.0f} s on "
          f"{results['device']}; eager overhead {results['eager_overhead_us']:.1f} us per op")
    return results


def _est_weight(entry) -> float:
    """A signature's estimated time summed over its nodes."""
    return sum(sum(v) for v in entry["nodes"].values())



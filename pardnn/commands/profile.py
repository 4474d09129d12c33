"""`pardnn profile MODEL [--size NAME] [--set k=v ...] [--steps S] [--devices cpu:K|gpu] -o DIR`.

MODEL is a built-in family (`pardnn models` lists them) or a path to a script
defining build(**knobs) (protocol in pardnn.models). Writes the profile dir of
docs/profiles.md (graph.pb, run_metadata_<i>.pb, profile.json) all or nothing.
With `--estimate PRESET` nothing runs: op costs are estimated for one GPU of the
preset by Grappler's analytical cost model (pardnn.tf.estimate, docs/estimates.md).
"""

import math
import os

from pardnn.base.errors import UserError
from pardnn.hardware.gpu_specs import check_conv_efficiency
from pardnn.io.outputs import check_output_dir
from pardnn.models import MAX_TRACED_STEPS, build_model, resolve_knobs, script_errors
from pardnn_builtin_models import load_module
from pardnn.base.progress import stage


def add_parser(sub):
    p = sub.add_parser("profile", help="run a model for a few traced steps and write a profile dir",
                       description="Profile a built-in model family or a script defining build(**knobs).")
    p.add_argument("model", metavar="MODEL", help="built-in family (see `pardnn models`) or path/to/script.py")
    p.add_argument("--size", metavar="NAME", help="named knob set of the model (e.g. tiny)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a knob (repeatable)")
    p.add_argument("--steps", type=int, default=5, metavar="S", help="traced steps after one warm-up step (default 5)")
    p.add_argument("--devices", default="cpu:1", metavar="cpu:K|gpu",
                   help="where to profile: K virtual CPU devices or the visible GPUs (default cpu:1)")
    p.add_argument("--estimate", metavar="PRESET",
                   help="don't run the model: estimate its op costs for one GPU of PRESET "
                        "(gpu:K, dgx1-v100, dgx2, dgx-a100, dgx-h100)")
    p.add_argument("--rewrites", choices=("on", "off"), default="off",
                   help="Grappler's graph rewriting while profiling: off (default; every node timed "
                        "as itself) or on, as your training runs (fused nodes' times are spread over "
                        "the nodes they replaced; docs/profiles.md)")
    p.add_argument("-o", "--out", required=True, metavar="PROFILE_DIR", help="output directory")
    p.add_argument("--micro-batches", type=int, default=1, metavar="M",
                   help="split each step's batch into M micro-batches with one update (the model's `batch` "
                        "knob must divide by M; pardnn.tf.micro_batches): the placement can run them side by "
                        "side; default 1")
    p.add_argument("--op-overhead", metavar="TIME",
                   help="with --estimate: fixed cost added to every op (kernel launch + dispatch; "
                        "default the preset's, 0 for none)")
    p.add_argument("--precision", metavar="fp32|tf32|fp16",
                   help="with --estimate: MatMul/convolution precision (default TF's on that GPU: "
                        "tf32 on A100/H100, fp32 on V100)")
    p.add_argument("--conv-efficiency", metavar="SHARE",
                   help="with --estimate: convolutions run at this share (0.01 to 1) of the "
                        "MatMul/convolution rate (default 1, the peak, as Grappler assumes; kernels timed "
                        "on an H100 reached 0.32 of it overall, docs/estimates.md)")
    p.set_defaults(run=run)


def run(args):
    from pardnn.tf.profiling import profile_model
    from pardnn.tf.session import parse_profile_devices

    parse_profile_devices(args.devices, runs=args.estimate is None)     # a bad flag: before any work
    target = None
    if args.estimate is not None:
        from pardnn.tf.estimate import estimate_model, gpu_target, summary_line
        target = gpu_target(args.estimate, op_overhead_us=_op_overhead(args.op_overhead),
                            precision=args.precision, conv_efficiency=_conv_efficiency(args.conv_efficiency))
    elif any(v is not None for v in (args.op_overhead, args.precision, args.conv_efficiency)):
        raise UserError("--op-overhead, --precision and --conv-efficiency apply to estimated costs: "
                        "add --estimate PRESET")
    if not 1 <= args.steps <= MAX_TRACED_STEPS:
        raise UserError(f"--steps: need 1 to {MAX_TRACED_STEPS} traced steps, got {args.steps}")
    check_output_dir(args.out, inputs=[args.model] if os.path.exists(args.model) else [])
    module = load_module(args.model)
    knobs = resolve_knobs(module, args.size, args.set)
    with stage(f"building {args.model}"):
        model, split = _built(module, args.model, knobs, args.micro_batches)
    is_script = args.model.endswith(".py") or os.sep in args.model
    meta = {"model": os.path.abspath(args.model) if is_script else args.model, "size": args.size, "knobs": knobs}
    if split is not None:
        meta["micro_batches"] = split.micro_batches
        print(_split_line(split))
    if target is not None:
        with stage(f"estimating op costs for {args.estimate}"), script_errors(module, args.model):
            result = estimate_model(model, target, args.out, meta)
        print(summary_line(args.model, result, args.out))
        return 0
    with stage(f"profiling {args.model}: warm-up + {args.steps} traced steps on {args.devices}"), \
            script_errors(module, args.model):
        doc = profile_model(model, args.steps, args.devices, args.out, meta=meta,
                            rewrites=args.rewrites == "on")
    nodes = len(model.graph.as_graph_def().node)
    print(f"profiled {args.model} ({nodes} nodes) for {doc['steps']} steps on {args.devices}; wrote {args.out}")
    return 0


def _built(module, name, knobs, micro_batches):
    """(Model, Split or None): built as it is, or as `micro_batches` micro-batches."""
    if micro_batches == 1:
        return build_model(module, name, knobs), None
    from pardnn.tf.micro_batches import micro_batched_model
    return micro_batched_model(module, name, knobs, micro_batches)


def _split_line(split) -> str:
    """What the micro-batch rewrite did, naming the layers whose statistics it changes."""
    line = (f"micro-batches: {split.micro_batches} per step, one update; {split.per_sample_ops} ops per "
            f"micro-batch, the loss a {split.loss} over the samples")
    if split.coupled:
        shown = ", ".join(split.coupled[:6]) + (f" and {len(split.coupled) - 6} more" if len(split.coupled) > 6 else "")
        line += f"; per-micro-batch statistics in {shown}"
    return line


def _op_overhead(text):
    """The --op-overhead time in us (None: the preset's); negative, unreadable or
    over a second (absurd for one op) is bad input."""
    if text is None:
        return None
    from pardnn.base.units import parse_time
    try:
        us = parse_time(text, "--op-overhead")
    except UserError:
        us = -1.0
    if not 0 <= us <= 1e6:
        raise UserError(f"--op-overhead: cannot use {text!r} (give a time from 0 to 1s, e.g. 5us, 500ns or 0)")
    return us


def _conv_efficiency(text):
    """The --conv-efficiency share (None: the full rate), checked as gpu_target checks it."""
    if text is None:
        return None
    try:
        share = float(text)
    except ValueError:
        share = math.nan
    return check_conv_efficiency(share, "--conv-efficiency", repr(text))

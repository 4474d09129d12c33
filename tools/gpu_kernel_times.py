"""The estimator's per-op costs against kernel times measured on a real GPU.

    python -m tools.gpu_kernel_times extract PROFILE_DIR [...] -o ops.json   # here: what was estimated
    python -m tools.gpu_kernel_times time ops.json -o times.json             # on the GPU (PyTorch, CUDA)
    python -m tools.gpu_kernel_times compare ops.json times.json [--csv F]   # here: the tables
    python -m tools.gpu_kernel_times compare ops.json docs/gpu_kernels_h100.csv   # without a GPU run

`extract` (tools/gpu_ops.py) groups the float ops of estimated profile dirs (`pardnn
profile FAMILY --estimate PRESET`) into signatures with their estimated times; `time`
(tools/gpu_kernels.py) runs each signature's kernel on the GPU, checks its output has
TensorFlow's shape, and takes its time from a CUDA graph of repeated calls (no launch
gaps); `compare` sets them side by side (docs/estimates.md, "Accuracy against a GPU").

Why PyTorch: the GPU machines lent to this project have PyTorch and no TensorFlow, and
TensorFlow cannot be carried there (its wheel is hundreds of MB against the 64 MiB a
call may carry). cuBLAS and cuDNN are what TensorFlow calls too, so this measures the
per-op costs the placement uses, on the chip; not TensorFlow's executor, and not a
placed graph.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import os
import sys

import numpy as np


from tools.commit_line import csv_comment
from tools.gpu_kernels import run_time
from tools.gpu_ops import ToolError, extract, flops

HERE = os.path.dirname(os.path.abspath(__file__))


def _ranks(values):
    """Ranks from 0, ties sharing their mean rank."""
    order = np.argsort(values, kind="stable")
    sorted_v = np.asarray(values)[order]
    ranks = np.empty(len(values))
    start = 0
    for end in range(1, len(values) + 1):
        if end == len(values) or sorted_v[end] != sorted_v[start]:
            ranks[order[start:end]] = (start + end - 1) / 2
            start = end
    return ranks


def spearman(a, b) -> float:
    """Spearman's rank correlation (NaN under three values)."""
    if len(a) < 3:
        return float("nan")
    return float(np.corrcoef(_ranks(a), _ranks(b))[0, 1])


def _measured(times) -> dict:
    """signature index -> measured us, for the signatures that ran."""
    return {t["index"]: t["us"] for t in times["times"] if t["us"] is not None}


def rows(ops, times):
    """Per node: (family, op, estimated us, measured us)."""
    measured = _measured(times)
    out = []
    for i, entry in enumerate(ops["signatures"]):
        if i in measured:
            for family, ests in entry["nodes"].items():
                out.extend((family, entry["sig"]["op"], e, measured[i]) for e in ests)
    return out


def compare(ops, times):
    """Print the three tables of docs/estimates.md, "Accuracy against a GPU"."""
    eager = times["eager_overhead_us"]
    run = (f" (torch {times['torch']}, cuDNN {times['cudnn']}), up to {times['repeats']} calls per CUDA graph"
           if times["torch"] else "")
    print(f"ops: {ops['commit']}; measured on {times['device']}{run}"
          + (f"; eager launch {eager:.1f} us per op" if not math.isnan(eager) else "")
          + (f"; every op in {times['dtype']}" if times.get("dtype") else ""))
    if "stopped_after" in times:
        print(f"the budget stopped the timing after {times['stopped_after']} of {len(ops['signatures'])} "
              "signatures (the heaviest estimates first)")
    data = rows(ops, times)
    _profile_table(ops, data)
    _op_table(data)
    _rate_table(ops, times)
    errors = [t for t in times["times"] if t["error"]]
    if errors:
        print(f"\n{len(errors)} signatures have no time, e.g. {errors[0]['error']}")


def _profile_table(ops, data):
    """Per profile; Spearman is over nodes (a signature counts once per node of it)."""
    print("\n| profile | nodes | measured nodes | their share of the estimate | Spearman | estimate / measured "
          "| without the per-op overhead | median ratio, ops measured under 10 us |")
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


def _op_table(data, most=15):
    """The op types with the most measured time."""
    print("\n| op | nodes | share of measured time | estimate / measured (sums) | median per node |")
    print("|---|---:|---:|---:|---:|")
    total = sum(r[3] for r in data)
    by_op = {}
    for _, op, e, m in data:
        by_op.setdefault(op, []).append((e, m))
    for op, pairs in sorted(by_op.items(), key=lambda kv: -sum(m for _, m in kv[1]))[:most]:
        e, m = np.array(pairs).T
        print(f"| {op} | {len(pairs)} | {m.sum() / total:.1%} | {e.sum() / m.sum():.2f} | {np.median(e / m):.2f} |")


def _rate_table(ops, times):
    """Matrix products and convolutions: the rate each reached, measured and estimated."""
    print("\n| op | TFLOP/s measured | TFLOP/s estimated (with the per-op overhead) |")
    print("|---|---:|---:|")
    measured = _measured(times)
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


def write_csv(ops, times, path):
    """One row per signature and profile: its nodes' mean estimate and the kernel's
    time, under two comment lines (the command, the GPU and the extraction's commit)."""
    measured = _measured(times)
    out = io.StringIO()
    out.write(csv_comment())
    out.write(f"# measured on {times['device']} (torch {times['torch']}, cuDNN {times['cudnn']}); "
              f"ops extracted at {ops['commit']}\n")
    w = csv.writer(out, lineterminator="\n")
    w.writerow(["signature", "op", "dtype", "profile", "nodes", "estimated_us", "measured_us",
                "inputs", "output", "attrs", "axes"])
    for i, entry in enumerate(ops["signatures"]):
        sig = entry["sig"]
        for family, ests in entry["nodes"].items():
            w.writerow([i, sig["op"], sig["dtype"], family, len(ests), f"{np.mean(ests):.4f}",
                        f"{measured[i]:.4f}" if i in measured else "", json.dumps(sig["ins"]),
                        json.dumps(sig["out"]), json.dumps(sig["attrs"], sort_keys=True),
                        json.dumps(sig.get("axes")) if "axes" in sig else ""])
    _write_text(out.getvalue(), path)


# ---- files and the command line ---------------------------------------------------------

def _read_json(path, key):
    """A JSON file this tool wrote, holding `key`; ToolError naming the file otherwise."""
    try:
        with open(path) as f:
            doc = json.load(f)
    except (OSError, ValueError) as exc:
        raise ToolError(f"{path}: cannot read ({exc})") from None
    if not isinstance(doc, dict) or key not in doc:
        raise ToolError(f"{path}: not this tool's file (no {key!r}; give the files in the order of the usage line)")
    return doc


def _signature_key(op, dtype, ins, out, attrs, axes) -> str:
    return json.dumps([op, dtype, ins, out, attrs, axes], sort_keys=True)


def read_times(path, ops) -> dict:
    """The kernel times for `ops`: a times.json that `time` wrote, or a CSV that
    `compare --csv` wrote (docs/gpu_kernels_h100.csv), its rows matched to `ops`'
    signatures by op, type, shapes and attributes (so a GPU run can be re-cut without
    a GPU, also against another extraction of the same graphs)."""
    if not path.endswith(".csv"):
        return _read_json(path, "times")
    try:
        with open(path) as f:
            lines = f.read().splitlines()
        head = [line for line in lines if line.startswith("# measured on ")]
        rows = list(csv.DictReader(line for line in lines if not line.startswith("#")))
        measured = {_signature_key(r["op"], r["dtype"], json.loads(r["inputs"]), json.loads(r["output"]),
                                   json.loads(r["attrs"]), json.loads(r["axes"]) if r["axes"] else None):
                    float(r["measured_us"]) for r in rows if r["measured_us"]}
    except (OSError, ValueError, KeyError) as exc:
        raise ToolError(f"{path}: not a CSV that compare --csv wrote ({exc})") from None
    device = head[0][len("# measured on "):].split(";")[0] if head else "unknown"
    times = []
    for i, entry in enumerate(ops["signatures"]):
        sig = entry["sig"]
        us = measured.get(_signature_key(sig["op"], sig["dtype"], sig["ins"], sig["out"], sig["attrs"],
                                         sig.get("axes")))
        times.append({"index": i, "us": us, "error": None if us is not None else "not in the CSV"})
    return {"device": f"{device} (from {os.path.basename(path)})", "torch": None, "cudnn": None,
            "repeats": None, "eager_overhead_us": math.nan, "times": times}


def _write_json(doc, path):
    _write_text(json.dumps(doc), path)


def _write_text(text, path):
    """Write through a temp file and a rename: nothing half-written."""
    tmp = path + ".tmp"
    try:
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except OSError as exc:
        raise ToolError(f"{path}: cannot write ({exc.strerror})") from None


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
    t.add_argument("--dtype", choices=("float16", "bfloat16"),
                   help="time every op in this type, as a mixed-precision step runs it (default: the op's own)")
    c = sub.add_parser("compare")
    c.add_argument("ops")
    c.add_argument("times", help="times.json from `time`, or a CSV from `compare --csv`")
    c.add_argument("--csv", metavar="F", help="also write every signature's estimate and kernel time")
    args = ap.parse_args(argv)
    try:
        if args.cmd == "extract":
            ops = extract(args.dirs)
            _write_json(ops, args.output)
            n = sum(len(v) for s in ops["signatures"] for v in s["nodes"].values())
            print(f"{len(ops['signatures'])} signatures over {n} nodes -> {args.output}")
        elif args.cmd == "time":
            _write_json(run_time(_read_json(args.ops, "signatures"), args.budget_s, args.dtype), args.output)
        else:
            ops = _read_json(args.ops, "signatures")
            times = read_times(args.times, ops)
            compare(ops, times)
            if args.csv:
                write_csv(ops, times, args.csv)
    except ToolError as exc:
        print(f"gpu_kernel_times: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())

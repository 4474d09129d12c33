"""The largest GPT-style model that `pardnn place --devices dgx-h100` fits (issue 40, item 4).

    python -m tools.bench_largest [--lo 128] [--hi 200] [--work DIR] [--devices dgx-h100]
        [--recompute auto|on|off]

A GPT-style Keras decoder (tools/keras_models.py `gpt`: d = 4096, 32 heads, sequence
1024, vocabulary 50,257, batch 1, Adam in float32) of L blocks is planned shape-only
with estimate="dgx-h100" (pardnn.tf.shape_only_variables, profile_function) in a
child process, then placed by `pardnn place PROF --devices dgx-h100` in another; L is
bisected between --lo (fits) and --hi (does not) to one block. `pardnn place`
pulls its memory levers as it does for a user (`--recompute auto`: activations are
recomputed when nothing fits otherwise); `--recompute off` measures without them. Each child's peak RSS
is measured (ru_maxrss), one child at a time. Prints, per size tried: parameters,
whether it fits, planning and placement seconds and peak RSS, and the least-memory
bound (report.json `least_memory` or the refusal); then the largest that fits and its
share of the ideal: the parameters whose weights and two Adam slots, 12 bytes each,
fill the devices' usable memory (8 x 72 GiB: about 51.5e9).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

from tools.commit_line import print_commit

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
D, HEADS, SEQ, VOCAB = 4096, 32, 1024, 50257



def plan_child(layers, out, estimate) -> None:
    """The planning child (`python -m tools.bench_largest --plan-child LAYERS --work
    PROF`): plan a model of `layers` blocks into PROF, print its parameters, seconds
    and peak RSS as one JSON line."""
    import resource

    import tensorflow as tf

    from tools.keras_models import gpt, parameters, plan
    t0 = time.perf_counter()
    specs = (tf.TensorSpec([1, SEQ], tf.int32), tf.TensorSpec([1, SEQ], tf.int32))
    model, _ = plan(lambda: gpt(layers, d=D, heads=HEADS, seq=SEQ, vocab=VOCAB), specs, out, estimate=estimate)
    print(json.dumps({"parameters": parameters(model), "seconds": time.perf_counter() - t0,
                      "rss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))


def child(cmd) -> tuple:
    """(returncode, stdout, stderr) of a child process run from the repository root
    (each prints its own peak RSS)."""
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    return proc.returncode, proc.stdout, proc.stderr


def try_size(layers, work, devices, estimate, recompute="auto") -> dict:
    """Plan and place a model of `layers` blocks; the row printed for it."""
    prof, placed = os.path.join(work, f"prof{layers}"), os.path.join(work, f"placed{layers}")
    rc, out, err = child(["nice", "-n", "10", sys.executable, "-m", "tools.bench_largest", "--plan-child",
                          str(layers), "--work", prof, "--estimate", estimate])
    if rc:
        sys.exit(f"planning {layers} blocks failed:\n{err[-3000:]}")
    planned = json.loads(out.strip().splitlines()[-1])
    t0 = time.perf_counter()
    place = [sys.executable, "-c", "import resource, sys; from pardnn.cli import main; rc = main(sys.argv[1:]); "
             "print('rss_kib', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss); sys.exit(rc)",
             "place", prof, "--devices", devices, "--recompute", recompute, "-o", placed]
    rc, out, err = child(["nice", "-n", "10", *place])
    row = {"layers": layers, "parameters": planned["parameters"], "plan_s": planned["seconds"],
           "plan_rss_mib": planned["rss_kib"] / 1024, "place_s": time.perf_counter() - t0, "fits": rc == 0}
    rss = [line for line in out.splitlines() if line.startswith("rss_kib")]
    row["place_rss_mib"] = int(rss[-1].split()[1]) / 1024 if rss else None
    if rc == 0:
        with open(os.path.join(placed, "report.json")) as f:
            report = json.load(f)
        row["least_memory"] = report["least_memory"]
        row["peaks_gib"] = [round(p / 2**30, 1) for p in report["peak_memory_bytes"]]
        row["step_ms"] = report["makespan_us"] / 1e3
        row["candidate"] = report.get("candidate")
        row["recompute"] = report.get("recompute")
    else:
        row["error"] = err.strip().splitlines()[-1] if err.strip() else f"exit {rc}"
    print(json.dumps(row), flush=True)
    return row


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lo", type=int, default=128, help="blocks that fit (checked)")
    ap.add_argument("--hi", type=int, default=200, help="blocks that do not fit (checked)")
    ap.add_argument("--devices", default="dgx-h100")
    ap.add_argument("--estimate", default="dgx-h100")
    ap.add_argument("--recompute", default="auto", choices=("auto", "on", "off"), help="as pardnn place's")
    ap.add_argument("--work", metavar="DIR", help="where the profiles and placements go (default: a temp dir)")
    ap.add_argument("--plan-child", type=int, metavar="LAYERS", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.plan_child is not None:
        return plan_child(args.plan_child, args.work, args.estimate)
    print_commit()
    from pardnn.hardware import parse_devices
    cluster = parse_devices(args.devices)
    ideal = int(cluster.capacity.sum()) / 12
    with tempfile.TemporaryDirectory(prefix="bench_largest_") as scratch:
        work = os.path.abspath(args.work or scratch)       # the children run from the repository root
        os.makedirs(work, exist_ok=True)
        rows = {}
        for size in (args.lo, args.hi):
            rows[size] = try_size(size, work, args.devices, args.estimate, args.recompute)
        if not rows[args.lo]["fits"] or rows[args.hi]["fits"]:
            sys.exit(f"--lo {args.lo} must fit and --hi {args.hi} must not")
        lo, hi = args.lo, args.hi
        while hi - lo > 1:
            mid = (lo + hi) // 2
            rows[mid] = try_size(mid, work, args.devices, args.estimate, args.recompute)
            lo, hi = (mid, hi) if rows[mid]["fits"] else (lo, mid)
    best, first = rows[lo], rows[hi]
    print(f"largest that fits: {lo} blocks, {best['parameters'] / 1e9:.2f}e9 parameters, "
          f"{best['parameters'] / ideal:.3f} of the ideal {ideal / 1e9:.1f}e9 (12 bytes each in "
          f"{cluster.num_devices} x {cluster.capacity.max() / 2**30:.0f} GiB); planned in {best['plan_s']:.0f} s "
          f"(peak RSS {best['plan_rss_mib']:.0f} MiB), placed in {best['place_s']:.0f} s (peak RSS "
          f"{best['place_rss_mib']:.0f} MiB)")
    print(f"first that does not: {hi} blocks, {first['parameters'] / 1e9:.2f}e9 parameters: {first['error']}")


if __name__ == "__main__":
    main()

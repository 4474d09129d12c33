"""How close do Grappler's analytical op costs come to measured ones? And how long
does estimating the thesis-size graphs take?

    python -m tools.estimate_accuracy                       # accuracy, tiny configs, host CPU
    python -m tools.estimate_accuracy --thesis /tmp/est    # thesis-size estimates instead
    python -m tools.estimate_accuracy --thesis /tmp/est --sizes real --target dgx-h100

Accuracy: for each built-in family's `tiny` config (or `--size NAME`), profile it on this CPU
(pardnn.tf.profile_model, cpu:1) and estimate it for this CPU (a Grappler CPU
device with TensorFlow's description of the host: clock, cores, caches, plus the
memory bandwidth measured here with a numpy copy). Over the nodes the measured step
timed, print the Spearman rank correlation of per-op times and the ratio of total
step time (sum of op times, estimated / measured), plus the per-op-type ratios of the
op types that dominate the measured step. No GPU comparison is made on a machine
without one.

Thesis sizes (`--thesis DIR`): estimate every family's `--sizes` configs (default
thesis,thesis-2) for `--target` (default dgx-h100) into DIR/<family>-<size>/ (the large
graphs for the speed and quality benchmarks) by running `pardnn profile FAMILY --size S
--estimate TARGET` in a child process, and print node count, trainable parameters,
the child's wall and CPU seconds and peak RSS, load seconds, the sum of the op times,
Grappler's peak memory and the emulated one-device peak.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np


from pardnn.models import resolve_knobs
from pardnn_builtin_models import FAMILIES, load_module
from pardnn.tf import estimate
from pardnn.tf.profile_loader import load_profile
from pardnn.tf.profiling import profile_model
from tools.commit_line import print_commit


def host_bandwidth_gbs(mib: int = 128, repeats: int = 5) -> float:
    """Memory bandwidth of this machine, GB/s: best numpy copy (read + write)."""
    src = np.ones(mib * 2**20 // 8)
    dst = np.empty_like(src)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        np.copyto(dst, src)
        best = min(best, time.perf_counter() - start)
    return 2 * src.nbytes / best / 1e9


def host_matmul_gflops(n: int = 1024, repeats: int = 5) -> float:
    """FP32 rate of this machine, GFLOP/s: best numpy n x n matmul."""
    a = np.ones((n, n), np.float32)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        a @ a
        best = min(best, time.perf_counter() - start)
    return 2 * n**3 / best / 1e9


def spearman(a, b) -> float:
    """Spearman rank correlation (average ranks for ties)."""
    return float(np.corrcoef(_ranks(a), _ranks(b))[0, 1])


def _ranks(x):
    x = np.asarray(x, float)
    order = np.argsort(x, kind="stable")
    ranks = np.empty(len(x))
    ranks[order] = np.arange(len(x))
    _, inverse, counts = np.unique(x, return_inverse=True, return_counts=True)
    sums = np.bincount(inverse, weights=ranks)
    return sums[inverse] / counts[inverse]


def compare(family: str, size: str, targets: dict, steps: int, work: str) -> list:
    """Measured vs estimated per-op times of one family's config, one row per target."""
    module = load_module(family)
    knobs = resolve_knobs(module, size)
    measured_dir = os.path.join(work, f"{family}-measured")
    profile_model(module.build(**knobs), steps=steps, devices="cpu:1", out_dir=measured_dir)
    measured, _ = load_profile(measured_dir)
    timed = measured.comp_us > 0
    meas, ops = measured.comp_us[timed], np.asarray(measured.ops)[timed]
    rows = []
    for label, target in targets.items():
        estimated_dir = os.path.join(work, f"{family}-{target.label}-{len(rows)}")
        doc = estimate.estimate_model(module.build(**knobs), target, estimated_dir)
        estimated, _ = load_profile(estimated_dir)
        index = estimated.index()
        est = estimated.comp_us[[index[name] for name in measured.names]][timed]
        rows.append({"family": family, "label": label, "nodes": measured.num_nodes, "timed": int(timed.sum()),
                     "fallback": len(doc["costs"]["fallback_nodes"]), "spearman": spearman(meas, est),
                     "measured_ms": meas.sum() / 1e3, "estimated_ms": est.sum() / 1e3,
                     "by_op": _by_op(ops, meas, est)})
    return rows


def _by_op(ops, meas, est, top=4):
    """(op, share of measured time, estimated / measured) for the heaviest op types."""
    kinds, inverse = np.unique(ops, return_inverse=True)
    m, e = np.bincount(inverse, weights=meas), np.bincount(inverse, weights=est)
    heavy = np.argsort(-m, kind="stable")[:top]
    return [(str(kinds[k]), m[k] / meas.sum(), e[k] / m[k]) for k in heavy]


def accuracy_table(families, size, steps) -> None:
    bandwidth, gflops = host_bandwidth_gbs(), host_matmul_gflops()
    targets = {"as TF describes it": estimate.host_cpu_target(bandwidth),
               "measured peak": estimate.host_cpu_target(bandwidth, gflops)}
    d = targets["as TF describes it"].description
    print(f"host: {d['name']}, {d['cores']} cores at {d['clock_mhz']} MHz; measured {bandwidth:.1f} GB/s "
          f"(numpy copy), {gflops:.0f} GFLOP/s (numpy matmul). Measured profile: {size} config, cpu:1, "
          f"median of {steps} steps. CPU rate given to Grappler: as TF describes it "
          f"({d['peak_gflops']:.1f} GFLOP/s, 1 FLOP/cycle/core) or the measured peak.")
    print("| family | CPU rate | nodes | timed | fallback | Spearman | measured ms | estimated ms | est/meas "
          "| heaviest op types: share of measured, est/meas |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as work:
        for family in families:
            for r in compare(family, size, targets, steps, work):
                ops = "; ".join(f"{op} {share:.0%} x{ratio:.2f}" for op, share, ratio in r["by_op"])
                print(f"| {family} | {r['label']} | {r['nodes']} | {r['timed']} | {r['fallback']} | "
                      f"{r['spearman']:.3f} | {r['measured_ms']:.3f} | {r['estimated_ms']:.3f} | "
                      f"{r['estimated_ms'] / r['measured_ms']:.3f} | {ops} |", flush=True)


def thesis_table(families, sizes, target_spec, out_root) -> None:
    from tools.bench_repair import single_peak
    from pardnn.pipeline.load import load_cost_graph
    target = estimate.gpu_target(target_spec)
    print(f"\nestimates for {target.label} ({target.description['name']}, {target.precision}, "
          f"{target.op_overhead_us:g} us per op) in {out_root}")
    print("| family | size | nodes | parameters | profile wall s | CPU s | peak RSS GB | load s "
          "| op time sum ms | Grappler peak GB | one-device peak GB | fallback nodes |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for family in families:
        for size in [s for s in sizes if s in getattr(load_module(family), "SIZES", {})]:
            out = os.path.join(out_root, f"{family}-{size}")
            wall, cpu, rss = _run_profile([family, "--size", size, "--estimate", target_spec, "-o", out])
            start = time.perf_counter()
            graph = load_cost_graph(out)[0]
            loaded = time.perf_counter() - start
            doc = json.load(open(os.path.join(out, "profile.json")))
            costs = doc["costs"]
            print(f"| {family} | {size} | {graph.num_nodes} | {doc['trainable_parameters'] / 1e9:.3f}e9 | "
                  f"{wall:.0f} | {cpu:.0f} | {rss / 1e9:.2f} | {loaded:.1f} | {costs['op_time_us'] / 1e3:.1f} | "
                  f"{costs['peak_memory_bytes'] / 1e9:.1f} | {single_peak(graph) / 1e9:.1f} | "
                  f"{len(costs['fallback_nodes'])} |", flush=True)


def _run_profile(args) -> tuple:
    """(wall s, CPU s, peak RSS bytes) of `pardnn profile ARGS` in a child process."""
    start = time.perf_counter()
    child = subprocess.Popen([sys.executable, "-m", "pardnn", "profile", *args], stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode:
        raise SystemExit(f"pardnn profile {' '.join(args)} failed ({child.returncode})")
    return time.perf_counter() - start, usage.ru_utime + usage.ru_stime, usage.ru_maxrss * 1024


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--families", default=",".join(FAMILIES), help="comma-separated families")
    parser.add_argument("--size", default="tiny", help="named config for the accuracy table (default tiny)")
    parser.add_argument("--steps", type=int, default=5, help="traced steps of the measured profiles")
    parser.add_argument("--thesis", metavar="DIR", help="estimate the thesis-size configs into DIR instead")
    parser.add_argument("--sizes", default="thesis,thesis-2", help="named configs for --thesis")
    parser.add_argument("--target", default="dgx-h100", help="GPU preset for the thesis-size estimates")
    args = parser.parse_args(argv)
    print_commit()
    families = [f for f in args.families.split(",") if f]
    if args.thesis:
        thesis_table(families, [x for x in args.sizes.split(",") if x], args.target, args.thesis)
    else:
        accuracy_table(families, args.size, args.steps)
    return 0


if __name__ == "__main__":
    sys.exit(main())

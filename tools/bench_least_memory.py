"""How close placements come to the least-memory bound (issue 40, item 3).

    python -m tools.bench_least_memory --profiles DIR [--families mlp,wrn] [--keras]
        [--k 2,4,8] [--algorithms pardnn,etf,topo] [--recompute] [--csv FILE]

For each graph and K (cpu:K, no reserve), the least memory per device at which each
algorithm fits, bisected as `pardnn capacity` does (pardnn.pipeline.capacity.count_row,
to within 1%), over `least_memory` (pardnn.repair.least_memory: nothing fits below
it). Graphs: the built-in families at `--size tiny` (profiled on this CPU into
DIR/FAMILY when missing: `pardnn profile FAMILY --size tiny --devices cpu:1`), and
with --keras two Keras models of tools/keras_models.py profiled with pardnn.tf on
this CPU (DIR/keras-resnet: a residual CNN with BatchNormalization; DIR/keras-encoder:
a stack of four transformer blocks). Prints one row per graph and K, then the largest
ratio and the geometric mean per algorithm; --csv writes the rows under the commit line.
With --recompute, pardnn's row also gets the least memory with recomputation
(`pardnn capacity --recompute on`: count_row's `least_recomputing`; empty when none
fits below the least without it) and, per row, the ratio for the levers used: that
memory over the bounds that hold whatever is recomputed (LeastMemory.recomputing)
when recomputation lowered it, else the ratio without it; its largest ratio and
geometric mean are printed as pardnn-levers'.
"""

from __future__ import annotations

import argparse
import math
import os
import subprocess
import sys
import time

from tools.commit_line import print_commit, write_rows

FAMILIES = ("mlp", "word-rnn", "char-crn", "wrn", "transformer", "e3d")
# Keras model -> (its function in tools/keras_models.py, its knobs, the input's shape and dtype)
KERAS = {
    "keras-resnet": ("residual_cnn", {"blocks": 3, "width": 16, "image": 32}, [8, 32, 32, 3], "float32"),
    "keras-encoder": ("encoder_stack", {"layers": 4, "d": 64, "heads": 4, "seq": 32}, [8, 32, 64], "float32"),
}
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def keras_child(name, out) -> None:
    """The profiling child (`python -m tools.bench_least_memory --keras-child NAME
    --profiles OUT`): profile Keras model NAME of KERAS on this CPU into OUT."""
    import tensorflow as tf

    from tools import keras_models
    function, knobs, shape, dtype = KERAS[name]
    make = getattr(keras_models, function)
    specs = (tf.TensorSpec(shape, getattr(tf, dtype)), tf.TensorSpec([shape[0]], tf.int32))
    keras_models.plan(lambda: make(**knobs), specs, out, steps=3)


def profile_dir(root, name) -> str:
    """DIR/name, profiled first when it holds no profile."""
    out = os.path.abspath(os.path.join(root, name))     # the child runs from the repository root
    if os.path.exists(os.path.join(out, "profile.json")):
        return out
    if name in KERAS:
        cmd = [sys.executable, "-m", "tools.bench_least_memory", "--keras-child", name, "--profiles", out]
    else:
        cmd = [sys.executable, "-m", "pardnn", "profile", name, "--size", "tiny", "--devices", "cpu:1", "-o", out]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)     # children run from the root
    if proc.returncode:
        sys.exit(f"profiling {name} failed:\n{proc.stderr[-3000:]}")
    return out


def measure(graph, k, algorithms, recompute=False):
    """(bound, {algorithm: least memory fitting}) for cpu:k, no reserve; with
    `recompute`, also "pardnn-recomputing": pardnn's least memory recomputing."""
    from pardnn.hardware import parse_devices
    from pardnn.pipeline.capacity import count_row
    from pardnn.repair.least_memory import least_memory
    from tools.placement_snapshot import one_device_peak
    peak = one_device_peak(graph)
    cluster = parse_devices(f"cpu:{k}").with_options(memory=peak, reserve=0.0)
    bound = least_memory(graph, k)
    least = {a: count_row(graph, cluster, a).least.memory for a in algorithms if not (recompute and a == "pardnn")}
    if recompute:
        row = count_row(graph, cluster, "pardnn", recompute="on")
        least["pardnn"] = row.least.memory
        least["pardnn-recomputing"] = row.least_recomputing.memory if row.least_recomputing else None
    return bound, least


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profiles", metavar="DIR", help="profile dirs (made when missing)")
    ap.add_argument("--families", default=",".join(FAMILIES))
    ap.add_argument("--keras", action="store_true", help="also the two Keras models")
    ap.add_argument("--k", default="2,4,8")
    ap.add_argument("--algorithms", default="pardnn,etf,topo")
    ap.add_argument("--recompute", action="store_true",
                    help="also pardnn's least memory with recomputation, over its bound")
    ap.add_argument("--csv", metavar="FILE")
    ap.add_argument("--keras-child", choices=KERAS, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if not args.profiles:
        ap.error("--profiles DIR is required")
    if args.keras_child:
        return keras_child(args.keras_child, args.profiles)
    print_commit()
    from pardnn.pipeline.load import load_cost_graph
    names = [f for f in args.families.split(",") if f] + (list(KERAS) if args.keras else [])
    algorithms = args.algorithms.split(",")
    rows, ratios = [], {a: [] for a in algorithms + (["pardnn-levers"] if args.recompute else [])}
    print("graph nodes K bound binding " + " ".join(f"{a} {a}/bound" for a in algorithms)
          + (" recomputing its-bound recomputing/bound levers-ratio" if args.recompute else "") + " seconds")
    for name in names:
        graph, _ = load_cost_graph(profile_dir(args.profiles, name))
        for k in [int(x) for x in args.k.split(",")]:
            t0 = time.perf_counter()
            bound, least = measure(graph, k, algorithms, args.recompute)
            row = {"graph": name, "nodes": graph.num_nodes, "k": k, "bound_bytes": bound.bytes,
                   "binding": bound.binding.name}
            for a in algorithms:
                row[a] = least[a]
                ratios[a].append(least[a] / bound.bytes)
            extra = ""
            if args.recompute:
                low, rec = least["pardnn-recomputing"], bound.recomputing().bytes
                levers = low / rec if low else least["pardnn"] / bound.bytes
                row.update({"pardnn_recomputing": low, "recomputing_bound_bytes": rec, "levers_ratio": levers})
                ratios["pardnn-levers"].append(levers)
                extra = f" {low or '-'} {rec} {f'{low / bound.bytes:.3f}' if low else '-'} {levers:.3f}"
            rows.append(row)
            print(name, graph.num_nodes, k, bound.bytes, repr(bound.binding.name),
                  " ".join(f"{least[a]} {least[a] / bound.bytes:.3f}" for a in algorithms) + extra,
                  f"{time.perf_counter() - t0:.1f}", flush=True)
    for a in ratios:
        geo = math.exp(sum(math.log(r) for r in ratios[a]) / len(ratios[a]))
        print(f"{a}: largest ratio {max(ratios[a]):.3f}, geometric mean {geo:.3f} over {len(ratios[a])} rows")
    if args.csv:
        write_rows(args.csv, rows)


if __name__ == "__main__":
    main()

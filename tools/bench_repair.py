"""Benchmark of the overflow repair (issue #5, thesis §4.1.2): quality, speed, and the
emulated peaks against TensorFlow's own estimate.

    python -m tools.bench_repair quality [--profiles DIR] [--families mlp,wrn] [--size tiny] [--algorithms a,b]
    python -m tools.bench_repair speed [--nodes 200000] [--devices 2] [--fraction 0.7]
    python -m tools.bench_repair grappler [--family word-rnn] [--size tiny] [--devices 4]

quality: for each built-in family (profiled once with `pardnn profile FAMILY [--size SIZE]`
into --profiles, reused when already there; default knobs unless --size) and a 20k-node synthetic graph
(tools/synth_graph.py), capacity = 0.6 x the single-device peak at K=4 and 0.3 x at
K=8 (memory = capacity / (1 - reserve)); where pardnn.repair.least_memory.least_memory
shows that some single requirement (one op's working set, one colocation group) needs
more than 1/1.1 of that, capacity is 1.1 x that bound instead and the row is starred. Prints, per algorithm: single-device peak,
peaks before and after repair (in units of capacity), feasibility, moved nodes (%:
moved by the repair), changed nodes (%: on another device than the placer chose,
ParDNN's refinement within memory included) and the makespan over that of the same
algorithm's unconstrained placement (memory unlimited, no repair needed), for ParDNN
also right after the repair, before its refinement within memory.

speed: a synthetic graph (default 200k nodes), all nodes on device 0 of K devices
with capacity = fraction x its peak, so that the repair must move a share of the
graph; prints nodes moved, rounds and repair seconds.

grappler: places a profiled family on K virtual CPUs with each of --algorithms
(`pardnn place`, capacity 0.6 x the single-device peak; `single` makes the repair
move the most), trains the placed graph with real TensorFlow for a few
steps (`pardnn run`), which measures what each device allocated in a traced step
(plus the resident state placed there: TF measured), then asks Grappler's
DeterminePeakMemoryUsage for each device's peak on the placed graph (train op in the
TRAIN_OP collection, detailed stats on) and prints both next to the emulated peak.
Needs TensorFlow; the other parts do not.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import subprocess
import sys
import time

import numpy as np


from pardnn.pipeline import place as placer
from pardnn.hardware import parse_devices
from pardnn.pipeline.report import evaluate
from pardnn.pipeline.judge import judge
from pardnn.repair.least_memory import least_memory
from pardnn.base.units import format_size
from tools.commit_line import print_commit

FAMILIES = ["mlp", "word-rnn", "char-crn", "wrn", "transformer", "e3d"]
SETTINGS = [(4, 0.6), (8, 0.3)]
UNLIMITED = 2**50


def single_peak(graph) -> int:
    return int(evaluate(graph, parse_devices("cpu:1").with_options(memory=UNLIMITED),
                        np.zeros(graph.num_nodes, np.int32)).peak_memory_bytes[0])


def sized_cluster(k, capacity, reserve=0.10):
    return parse_devices(f"cpu:{k}").with_options(memory=int(np.ceil(capacity / (1 - reserve))),
                                                  reserve=reserve)


def quality_row(name, graph, k, frac, algorithm):
    peak = single_peak(graph)
    free = parse_devices(f"cpu:{k}").with_options(memory=UNLIMITED)
    loose = placer.place(graph, free, algorithm)[1].to_json()
    least = least_memory(graph, k).bytes
    if 1.1 * least > frac * peak:   # (nearly) no placement could fit: 1.1 x the bound
        name, frac = f"{name}*", 1.1 * least / peak
    cluster = sized_cluster(k, frac * peak)
    cap = int(cluster.capacity[0])
    try:
        rep = placer.place(graph, cluster, algorithm)[1].to_json()
    except Exception as exc:  # a UserError is the answer for an infeasible request
        return f"{name:12s} K={k} {frac:.2f}x {algorithm:8s} FAILED: {exc}"
    before = " ".join(f"{x / cap:.2f}" for x in rep["peak_memory_before_repair_bytes"])
    after = " ".join(f"{x / cap:.2f}" for x in rep["peak_memory_bytes"])
    return (f"{name:12s} K={k} {frac:.2f}x {algorithm:8s} nodes {graph.num_nodes:6d} "
            f"1-dev peak {format_size(peak):>11s}  feasible {rep['feasible']!s:5s} "
            f"moved {rep['moved_nodes']:5d} ({rep['moved_nodes'] / graph.num_nodes:5.1%})  "
            f"changed {rep['changed_nodes'] / graph.num_nodes:5.1%}  "
            f"makespan {rep['makespan_us'] / loose['makespan_us']:.3f}x unconstrained{_after_repair(rep, loose)}  "
            f"repair {rep['stage_seconds']['repair']:.2f} s{_refine_time(rep)}  "
            f"peaks/cap before [{before}] after [{after}]")


def _after_repair(rep, loose) -> str:
    """The makespan right after the repair, before ParDNN's refinement within memory."""
    fit = rep.get("refine_memory")
    return f" ({fit['makespan_after_repair_us'] / loose['makespan_us']:.3f}x after repair alone)" if fit else ""


def _refine_time(rep) -> str:
    seconds = rep["stage_seconds"].get("refine_memory")
    return f" + refine {seconds:.2f} s" if seconds is not None else ""


def profile_dir(root, family, size):
    path = os.path.join(root, f"{family}-{size}")
    if not os.path.isfile(os.path.join(path, "graph.pb")):
        sized = [] if size == "default" else ["--size", size]
        subprocess.run([sys.executable, "-m", "pardnn", "profile", family, *sized, "-o", path],
                       check=True, stdout=subprocess.DEVNULL)
    return path


def run_quality(args):
    from pardnn.pipeline.load import load_cost_graph
    from tools.synth_graph import synth_graph
    graphs = [(f, load_cost_graph(profile_dir(args.profiles, f, args.size))[0]) for f in args.families]
    graphs.append(("synth-20k", synth_graph(20_000, seed=0)))
    for name, graph in graphs:
        for k, frac in SETTINGS:
            for algorithm in args.algorithms:
                print(quality_row(name, graph, k, frac, algorithm), flush=True)


def run_speed(args):
    from tools.synth_graph import synth_graph
    t0 = time.perf_counter()
    graph = synth_graph(args.nodes, seed=0)
    start = np.zeros(graph.num_nodes, np.int32)
    peak = single_peak(graph)
    cluster = sized_cluster(args.devices, args.fraction * peak)
    print(f"synthetic graph: {graph.num_nodes} nodes, {graph.num_edges} edges, "
          f"{graph.num_groups} groups (built and emulated in {time.perf_counter() - t0:.1f} s); "
          f"one-device peak {format_size(peak)}; capacity {format_size(cluster.capacity[0])} "
          f"on each of {args.devices} devices")
    t1 = time.perf_counter()
    result = judge(graph, cluster, start)
    seconds = time.perf_counter() - t1
    moved = int(result.moved.sum())
    print(f"repair: moved {moved} nodes ({moved / graph.num_nodes:.1%}) in {result.rounds} rounds, "
          f"{seconds:.2f} s; peaks after {[format_size(x) for x in result.profile.peak_bytes]}; "
          f"fits: {bool(np.all(result.profile.peak_bytes <= cluster.capacity))}")


def run_grappler(args):
    from pardnn.pipeline.load import load_cost_graph
    prof = profile_dir(args.profiles, args.family, args.size)
    graph, _ = load_cost_graph(prof)
    peak = single_peak(graph)
    cluster = sized_cluster(args.devices, 0.6 * peak)
    for algorithm in args.algorithms:
        out = os.path.join(args.profiles, f"{args.family}-{args.size}-{algorithm}{args.devices}")
        subprocess.run([sys.executable, "-m", "pardnn", "place", prof, "--devices", f"cpu:{args.devices}",
                        "--memory", str(cluster.devices[0].memory), "--algorithm", algorithm, "-o", out],
                       check=True, stdout=subprocess.DEVNULL)
        report = json.load(open(os.path.join(out, "report.json")))
        run = subprocess.run([sys.executable, "-m", "pardnn", "run", out, "--steps", "3"],
                             check=True, capture_output=True, text=True)
        measured = measured_peaks(run.stdout, graph, out, report["devices"])
        print(f"{args.family} ({args.size}, {graph.num_nodes} nodes) placed by {algorithm} on "
              f"cpu:{args.devices}, capacity {format_size(cluster.capacity[0])} (0.6 x one-device peak "
              f"{format_size(peak)}): repair moved {report['moved_nodes']} nodes off "
              f"{len(report['repaired_devices'])} device(s); feasible {report['feasible']}")
        lines = run.stdout.strip().splitlines()
        print(f"  real TF ran it: {[x for x in lines if 'loss' in x][-1]}; {lines[-1]}")
        grappler = grappler_peaks(os.path.join(out, "placed_graph.pb"), report["devices"], prof)
        for d, name in enumerate(report["devices"]):
            emu, grp, real = report["peak_memory_bytes"][d], grappler.get(name, 0), measured[d]
            print(f"  {name}: emulated {format_size(emu):>11s}  TF measured {format_size(real):>11s} "
                  f"({relative(emu, real)})  Grappler {format_size(grp):>11s} ({relative(emu, grp)}); "
                  f"fits by: emulator {emu <= cluster.capacity[d]}, TF {real <= cluster.capacity[d]}, "
                  f"Grappler {grp <= cluster.capacity[d]}")


def relative(emulated, other) -> str:
    return f"emulated {(emulated - other) / other:+.1%}" if other > 0 else "n/a"


def measured_peaks(run_stdout, graph, placed_dir, devices) -> list:
    """Per device: the peak TF allocated in the traced first step (`pardnn run`
    prints it) plus the resident state placed there (variables and slots, which
    were allocated before the step), comparable with the emulated peak."""
    from pardnn.graph.node_memory import resident_bytes
    step = dict(re.findall(r"^  (\S+): peak .* \((\d+) B\)$", run_stdout, re.M))
    index = graph.index()
    device_of = np.zeros(graph.num_nodes, np.int64)
    with open(os.path.join(placed_dir, "placement.csv")) as f:
        for row in csv.DictReader(f):
            device_of[index[row["node"]]] = devices.index(row["device"])
    resident = np.bincount(device_of, resident_bytes(graph), minlength=len(devices))
    return [int(step.get(name, 0)) + int(resident[d]) for d, name in enumerate(devices)]


def grappler_peaks(placed_pb, devices, prof) -> dict:
    """Grappler's DeterminePeakMemoryUsage per device of a placed GraphDef."""
    import tensorflow as tf
    from tensorflow.core.protobuf import device_properties_pb2
    from tensorflow.python.grappler import cluster as gcluster
    from tensorflow.python.grappler import item as gitem

    doc = json.load(open(os.path.join(prof, "profile.json")))
    graph_def = tf.compat.v1.GraphDef()
    graph_def.ParseFromString(open(placed_pb, "rb").read())
    with tf.Graph().as_default() as g:
        tf.compat.v1.import_graph_def(graph_def, name="")
        g.add_to_collection(tf.compat.v1.GraphKeys.TRAIN_OP, g.get_operation_by_name(doc["train_op"]))
        meta = tf.compat.v1.train.export_meta_graph(graph=g)
    props = device_properties_pb2.DeviceProperties(type="CPU", frequency=2000, num_cores=1,
                                                   memory_size=2**34, bandwidth=20 * 10**6)
    named = [device_properties_pb2.NamedDevice(name=d, properties=props) for d in devices]
    cluster = gcluster.Cluster(disable_detailed_stats=False, disable_timeline=False, devices=named)
    peaks = cluster.DeterminePeakMemoryUsage(gitem.Item(meta))
    return {name: int(value[0]) for name, value in peaks.items()}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("part", nargs="?", default="all", choices=["all", "quality", "speed", "grappler"])
    p.add_argument("--profiles", default="/tmp/pardnn-bench-repair", help="where family profiles are kept")
    p.add_argument("--families", default=",".join(FAMILIES))
    p.add_argument("--algorithms", default="pardnn")
    p.add_argument("--size", default="default", help="a family size, or 'default' for its default knobs")
    p.add_argument("--nodes", type=int, default=200_000)
    p.add_argument("--devices", type=int, default=None)
    p.add_argument("--fraction", type=float, default=0.75)
    p.add_argument("--family", default="word-rnn")
    args = p.parse_args(argv)
    print_commit()
    args.families = [f for f in args.families.split(",") if f]
    args.algorithms = [a for a in args.algorithms.split(",") if a]
    os.makedirs(args.profiles, exist_ok=True)
    if args.part in ("all", "quality"):
        run_quality(args)
    if args.part in ("all", "speed"):
        run_speed(argparse.Namespace(**{**vars(args), "devices": args.devices or 2}))
    if args.part in ("all", "grappler"):
        run_grappler(argparse.Namespace(**{**vars(args), "devices": args.devices or 4}))
    return 0


if __name__ == "__main__":
    sys.exit(main())

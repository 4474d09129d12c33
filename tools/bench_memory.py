"""Benchmark of placement when the model does not fit one device (issue #14).

    python -m tools.bench_memory quality [--profiles DIR] [--families mlp,e3d] [--synth chain:3000:1,...]
                                         [--ks 2,4,8,16] [--fractions 0.6,0.3,tight] [--csv F]
    python -m tools.bench_memory speed [--nodes 200000] [--k 16] [--fraction 0.3]
    python -m tools.bench_memory step1-memory [--profiles DIR] [--families e3d:8,wrn:4]
    python -m tools.bench_memory table docs/benchmarks_memory.csv

quality: for each graph (built-in families profiled once into --profiles with default
knobs, as tools/bench_repair.py does; synthetic graphs `SHAPE:NODES:SEED` from
tools/synth_graph.py), each K and each capacity (a fraction of the graph's emulated
one-device peak, reserve 0; `tight` is the least fraction, found by bisection, at which
any placer other than pardnn fits), every registered placer places the graph. A row
prints each placer's emulated step (ms; `-` where it cannot fit), pardnn's step over the
best other placer's, its winning candidate, the share of nodes its repairs moved and its
placement time. The summary gives the geometric mean of that ratio, the rows above
1.00, the rows where pardnn is infeasible but another placer is not, and the most nodes
moved; then the two markdown tables of docs/benchmarks.md ("Memory-bound placement").
--csv writes every row, under a first line naming the commit and the command.

table: the same markdown tables from a CSV that `quality --csv` wrote.

step1-memory: where Step 1 alone puts resident state and activations: per device,
its share of the resident bytes and of the sum of emulated peaks (memory unlimited).

speed: Steps 1+2 of pardnn on a synthetic graph (default 200k nodes, K = 16, 0.3x),
with the stage times, and the other placers' times measured in the same run.
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import sys
import time

import numpy as np


from tools.bench_repair import profile_dir, single_peak
from tools.synth_graph import synth_graph

from pardnn.base.errors import UserError
from pardnn.hardware import parse_devices
from pardnn.pipeline import place as placer
from pardnn.placers.registry import names
from tools.commit_line import csv_comment, print_commit

OTHERS = [n for n in names() if n not in ("pardnn", "pardnn-hier")]


def capacity_cluster(k, capacity):
    return parse_devices(f"cpu:{k}").with_options(memory=int(capacity), reserve=0.0)


def makespans(graph, cluster, algorithms) -> dict:
    """algorithm -> (report or None when it cannot fit, seconds)."""
    out = {}
    for name in algorithms:
        t0 = time.perf_counter()
        try:
            report = placer.place(graph, cluster, name)[1].to_json()
        except UserError:
            report = None
        out[name] = (report, time.perf_counter() - t0)
    return out


def any_fits(graph, k, capacity) -> bool:
    cluster = capacity_cluster(k, capacity)
    for name in ("topo", "metis", "etf", "round-robin", "heft", "linear", "single"):
        try:
            placer.place(graph, cluster, name)
            return True
        except UserError:
            continue
    return False


def tightest(graph, k, peak) -> float:
    """The least fraction of the one-device peak (to 2%) at which some other placer fits."""
    lo, hi = 0.0, 1.0
    while hi - lo > 0.02:
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if any_fits(graph, k, mid * peak) else (mid, hi)
    return hi


def row(name, graph, k, fraction, peak, setting) -> dict:
    cluster = capacity_cluster(k, fraction * peak)
    results = makespans(graph, cluster, ["pardnn"] + OTHERS)
    rec = {"graph": name, "nodes": graph.num_nodes, "K": k, "setting": setting, "fraction": round(fraction, 3)}
    for alg, (rep, _) in results.items():
        rec[alg] = rep["makespan_us"] if rep else None
    best = min((rec[a] for a in OTHERS if rec[a] is not None), default=None)
    mine, secs = results["pardnn"]
    rec["ratio"] = rec["pardnn"] / best if mine and best else None
    rec["candidate"] = mine["candidate"] if mine else None
    rec["moved"] = mine["moved_nodes"] / graph.num_nodes if mine else None
    rec["pardnn_s"] = secs
    return rec


def format_row(rec) -> str:
    cells = " ".join(f"{alg}={rec[alg] / 1e3:.2f}" if rec[alg] is not None else f"{alg}=-"
                     for alg in ["pardnn"] + OTHERS)
    ratio = f"{rec['ratio']:.3f}" if rec["ratio"] is not None else "  -  "
    moved = f"{rec['moved']:.1%}" if rec["moved"] is not None else "-"
    return (f"{rec['graph']:14s} K={rec['K']:<2d} {rec['fraction']:.2f}x  pardnn/best {ratio}  "
            f"[{rec['candidate']}] moved {moved}  {rec['pardnn_s']:.1f}s | ms: {cells}")


def graphs(args):
    from pardnn.pipeline.load import load_cost_graph
    for family in args.families:
        yield family, load_cost_graph(profile_dir(args.profiles, family, "default"))[0]
    for spec in args.synth:
        shape, nodes, seed = spec.split(":")
        yield f"{shape}-{int(nodes) // 1000}k-s{seed}", synth_graph(int(nodes), int(seed), shape)


def run_quality(args):
    records = []
    for name, graph in graphs(args):
        peak = single_peak(graph)
        for k in args.ks:
            for frac in args.fractions:
                f = tightest(graph, k, peak) if frac == "tight" else float(frac)
                rec = row(name, graph, k, f, peak, frac)
                records.append(rec)
                print(format_row(rec), flush=True)
    print_summary(records)
    print("\n" + markdown(records))
    if args.csv:
        tmp = f"{args.csv}.tmp{os.getpid()}"
        with open(tmp, "w", newline="") as fh:
            fh.write(csv_comment())
            writer = csv.DictWriter(fh, fieldnames=list(records[0]))
            writer.writeheader()
            writer.writerows(records)
        os.replace(tmp, args.csv)


def read_records(path) -> list:
    """The rows `quality --csv` wrote (its first line names the commit)."""
    with open(path, newline="") as fh:
        first = fh.readline()
        print(first.strip())
        rows = list(csv.DictReader(fh))
    text = ("graph", "setting", "candidate")
    return [{k: (v if k in text else None if v == "" else int(v) if k in ("nodes", "K") else float(v))
             for k, v in r.items()} for r in rows]


def cell(rec, with_fraction=False) -> str:
    """pardnn / best other, the winning candidate, nodes moved; or why there is none."""
    lead = f"{rec['fraction']:.2f}x: " if with_fraction else ""
    if rec["ratio"] is not None:
        return f"{lead}{rec['ratio']:.3f} {rec['candidate']} {rec['moved']:.0%}"
    if rec["pardnn"] is not None:
        return f"{lead}only pardnn fits ({rec['candidate']} {rec['moved']:.0%})"
    others = any(rec[a] is not None for a in OTHERS)
    return f"{lead}{'pardnn cannot fit' if others else 'none fits'}"


def markdown(records) -> str:
    """The per-row table and the acceptance table of docs/benchmarks.md."""
    settings = list(dict.fromkeys(r["setting"] for r in records))
    names = {s: "tightest any other placer fits" if s == "tight" else f"{s}x" for s in settings}
    lines = ["| graph | nodes | K | " + " | ".join(names[s] for s in settings) + " |",
             "|---|---:|---:|" + "---|" * len(settings)]
    by_row = {}
    for r in records:
        by_row.setdefault((r["graph"], r["nodes"], r["K"]), {})[r["setting"]] = r
    for (graph, nodes, k), cells in by_row.items():
        lines.append(f"| {graph} | {nodes} | {k} | "
                     + " | ".join(cell(cells[s], s == "tight") if s in cells else "" for s in settings) + " |")
    groups = [(f"{names[s]} ({sum(r['setting'] == s for r in records)} rows)",
               [r for r in records if r["setting"] == s]) for s in settings]
    groups.append((f"all {sum(r['ratio'] is not None for r in records)} rows with a ratio", records))
    lines += ["", "| | " + " | ".join(label for label, _ in groups) + " |", "|---|" + "---:|" * len(groups)]
    for label, stat in (("pardnn / best other placer, geometric mean", _geo),
                        ("worst row", lambda rs: max((r["ratio"] for r in rs if r["ratio"] is not None),
                                                     default=float("nan"))),
                        ("rows where pardnn cannot fit but another placer can", _lost),
                        ("rows moving more than 10% of the nodes",
                         lambda rs: sum(r["moved"] is not None and r["moved"] > 0.10 for r in rs))):
        values = [stat(rs) for _, rs in groups]
        lines.append(f"| {label} | " + " | ".join(f"{v:.3f}" if isinstance(v, float) else str(v)
                                                   for v in values) + " |")
    return "\n".join(lines)


def _geo(records) -> float:
    ratios = [r["ratio"] for r in records if r["ratio"] is not None]
    return math.exp(sum(map(math.log, ratios)) / len(ratios)) if ratios else float("nan")


def _lost(records) -> int:
    return sum(r["pardnn"] is None and any(r[a] is not None for a in OTHERS) for r in records)


def print_summary(records):
    ratios = [r["ratio"] for r in records if r["ratio"] is not None]
    lost = [r for r in records if r["pardnn"] is None and any(r[a] is not None for a in OTHERS)]
    above = [r for r in records if r["ratio"] is not None and r["ratio"] > 1.0 + 1e-9]
    moved = max((r["moved"] for r in records if r["moved"] is not None), default=0.0)
    geo = _geo(records)
    print(f"\n{len(records)} rows; pardnn / best other placer: geometric mean {geo:.3f}, "
          f"max {max(ratios, default=float('nan')):.3f}; rows above 1.00: {len(above)}; "
          f"infeasible where another fits: {len(lost)}; most nodes moved {moved:.1%}")
    for r in above + lost:
        print(f"  miss: {format_row(r)}")


def run_speed(args):
    graph = synth_graph(args.nodes, seed=0, shape=args.shape)
    peak = single_peak(graph)
    cluster = capacity_cluster(args.k, args.fraction * peak)
    print(f"{graph.num_nodes} nodes, {graph.num_edges} edges, K={args.k}, "
          f"capacity {args.fraction}x the one-device peak")
    for name in ["pardnn"] + args.reference:
        t0 = time.perf_counter()
        try:
            rep = placer.place(graph, cluster, name)[1].to_json()
        except UserError as exc:
            print(f"  {name:12s} infeasible ({time.perf_counter() - t0:.1f} s): {str(exc)[:80]}")
            continue
        stages = " ".join(f"{k} {v:.2f}" for k, v in rep["stage_seconds"].items())
        print(f"  {name:12s} {time.perf_counter() - t0:6.2f} s  makespan {rep['makespan_us'] / 1e3:.1f} ms"
              f"  moved {rep['moved_nodes'] / graph.num_nodes:.1%}  [{stages}]"
              + (f"  candidate {rep['candidate']}" if "candidate" in rep else ""), flush=True)


def run_step1_memory(args):
    from pardnn.pipeline.report import evaluate
    from pardnn.graph.node_memory import resident_bytes
    from pardnn.pipeline.load import load_cost_graph
    from pardnn.emulator.trial import emulate
    from pardnn.placers import step1
    for spec in args.families:
        family, k = spec.split(":")
        graph = load_cost_graph(profile_dir(args.profiles, family, "default"))[0]
        cluster = parse_devices(f"cpu:{k}")
        device = step1.partition(graph, cluster, {}, emulate=emulate).device
        res = np.bincount(device, resident_bytes(graph), int(k))
        peaks = np.array(evaluate(graph, cluster, device).peak_memory_bytes, float)
        print(f"{family:12s} K={k:2s} resident share % {np.round(100 * res / res.sum()).astype(int).tolist()}"
              f"  peak share % {np.round(100 * peaks / peaks.sum()).astype(int).tolist()}")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="mode", required=True)
    q = sub.add_parser("quality")
    q.add_argument("--profiles", default="/tmp/pardnn-profiles")
    q.add_argument("--families", type=lambda s: [x for x in s.split(",") if x], default=[])
    q.add_argument("--synth", type=lambda s: [x for x in s.split(",") if x],
                   default=["chain:3000:1", "chain:3000:2", "dag:3000:1"])
    q.add_argument("--ks", type=lambda s: [int(x) for x in s.split(",")], default=[2, 4, 8, 16])
    q.add_argument("--fractions", type=lambda s: s.split(","), default=["0.6", "0.3", "tight"])
    q.add_argument("--csv")
    s = sub.add_parser("speed")
    s.add_argument("--nodes", type=int, default=200_000)
    s.add_argument("--k", type=int, default=16)
    s.add_argument("--fraction", type=float, default=0.3)
    s.add_argument("--shape", default="dag")
    s.add_argument("--reference", type=lambda s: s.split(","), default=["etf", "metis", "topo"])
    m = sub.add_parser("step1-memory")
    m.add_argument("--profiles", default="/tmp/pardnn-profiles")
    m.add_argument("--families", type=lambda s: s.split(","),
                   default=["e3d:8", "word-rnn:8", "transformer:4", "wrn:4"])
    t = sub.add_parser("table")
    t.add_argument("csv")
    args = p.parse_args(argv)
    print_commit()
    {"quality": run_quality, "speed": run_speed, "step1-memory": run_step1_memory,
     "table": lambda a: print(markdown(read_records(a.csv)))}[args.mode](args)
    return 0


if __name__ == "__main__":
    sys.exit(main())

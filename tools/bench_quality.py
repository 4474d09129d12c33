"""Placement quality of every algorithm on every built-in family (issue #7); writes Markdown and CSV.

    python tools/bench_quality.py [--work DIR] [--families mlp,wrn] [--size tiny] [--synth 20000]
                                  [--k 2,4,8,16] [--algorithms a,b] [--fraction 0.6] [-o docs/bench]

Graphs: each family profiled once with `pardnn profile FAMILY --size SIZE --devices cpu:1`
into --work (reused when already there) plus a synthetic training-like graph
(tools/synth_graph.py, seed 0). For every graph, K and algorithm, the placement goes
through pardnn.pipeline.place.place, exactly as `pardnn place`/`pardnn compare` do (placer, then
the overflow repair, then the emulator), on K virtual CPUs in two settings:
  unlimited  memory 2^50 bytes per device: makespan alone;
  limited    capacity = --fraction x the graph's single-device emulated peak on each device.
Reported per row: emulated makespan, speedup = single-device makespan / makespan,
feasible (False when the placer plus repair cannot fit; the placer's message is kept),
bytes communicated, placement seconds (placer + repair). Writes OUT.csv (one line per
placement) and OUT.md (speedup tables and a summary of each algorithm against ParDNN).
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

from bench_repair import UNLIMITED, profile_dir, single_peak, sized_cluster  # noqa: E402

from pardnn.pipeline import place as placer
from pardnn.placers import registry as algorithms  # noqa: E402
from pardnn.hardware import parse_devices  # noqa: E402
from pardnn.errors import UserError  # noqa: E402
from pardnn.models import FAMILIES  # noqa: E402
from commit_line import print_commit  # noqa: E402

COLUMNS = ["graph", "nodes", "k", "memory", "algorithm", "makespan_us", "speedup", "feasible",
           "comm_bytes", "placement_seconds", "error"]


def graphs(args):
    """(name, CostGraph) for every family profile and the synthetic graph."""
    from synth_graph import synth_graph

    from pardnn.pipeline.load import load_cost_graph
    for family in args.families:
        yield family, load_cost_graph(profile_dir(args.work, family, args.size))[0]
    if args.synth:
        yield f"synth-{args.synth // 1000}k", synth_graph(args.synth, seed=0)


def one(name, graph, k, memory, algorithm, cluster) -> dict:
    row = {"graph": name, "nodes": graph.num_nodes, "k": k, "memory": memory, "algorithm": algorithm}
    try:
        _, rep = placer.place(graph, cluster, algorithm)
    except UserError as exc:
        return {**row, "feasible": False, "error": str(exc)}
    return {**row, "makespan_us": round(rep["makespan_us"], 3), "feasible": rep["feasible"],
            "speedup": round(rep["single_device_us"] / rep["makespan_us"], 4),
            "comm_bytes": rep["comm_bytes"], "placement_seconds": round(rep["placement_seconds"], 4)}


def run(args) -> list:
    rows = []
    for name, graph in graphs(args):
        limited = args.fraction * single_peak(graph)
        for k in args.k:
            settings = [("unlimited", parse_devices(f"cpu:{k}").with_options(memory=UNLIMITED)),
                        (f"{args.fraction:g}x peak", sized_cluster(k, limited))]
            for memory, cluster in settings:
                for algorithm in args.algorithms:
                    rows.append(one(name, graph, k, memory, algorithm, cluster))
                    r = rows[-1]
                    print(f"{name:12s} K={k:<2d} {memory:10s} {algorithm:12s} "
                          f"{r.get('speedup', 'infeasible')}", flush=True)
    return rows


def speedup_cell(r) -> str:
    if not r["feasible"]:
        return "—"
    return f"{r['speedup']:.2f}"


def markdown(rows, args) -> str:
    """One speedup table per memory setting, then each algorithm against ParDNN."""
    out = []
    for memory in dict.fromkeys(r["memory"] for r in rows):
        out += [f"### Memory: {memory}", "",
                "| graph | nodes | K | " + " | ".join(args.algorithms) + " |",
                "|---|---:|---:|" + "---:|" * len(args.algorithms)]
        cells = {}
        for r in rows:
            if r["memory"] == memory:
                cells.setdefault((r["graph"], r["nodes"], r["k"]), {})[r["algorithm"]] = r
        for (graph, nodes, k), by in cells.items():
            best = max((x["speedup"] for x in by.values() if x["feasible"]), default=None)
            marks = [f"**{speedup_cell(by[a])}**" if by[a]["feasible"] and by[a]["speedup"] == best
                     else speedup_cell(by[a]) for a in args.algorithms]
            out.append(f"| {graph} | {nodes} | {k} | " + " | ".join(marks) + " |")
        out.append("")
    return "\n".join(out + summary(rows, args))


def summary(rows, args) -> list:
    """Per algorithm and memory setting: geometric mean of its makespan over ParDNN's
    (> 1: ParDNN faster) where both fit, and how often it could not fit."""
    key = {(r["graph"], r["k"], r["memory"], r["algorithm"]): r for r in rows}
    out = ["### Against ParDNN", "",
           "makespan / ParDNN's makespan, geometric mean over graphs and K where both fit "
           "(> 1: ParDNN is faster); wins = settings where it is faster than ParDNN by more than 1%; "
           "lowest = its best setting against ParDNN; infeasible = settings where it cannot fit.", "",
           "| algorithm | memory | vs ParDNN (geo-mean) | lowest | highest | wins | infeasible |", "|---|---|---:|---:|---:|---:|---:|"]
    for memory in dict.fromkeys(r["memory"] for r in rows):
        for algorithm in args.algorithms:
            ratios, bad = [], 0
            for (g, k, m, a), r in key.items():
                if a != algorithm or m != memory:
                    continue
                base = key[(g, k, m, "pardnn")]
                bad += not r["feasible"]
                if r["feasible"] and base["feasible"]:
                    ratios.append(r["makespan_us"] / base["makespan_us"])
            if ratios:
                geo = math.exp(sum(map(math.log, ratios)) / len(ratios))
                out.append(f"| {algorithm} | {memory} | {geo:.2f} | {min(ratios):.2f} | {max(ratios):.2f} | "
                           f"{sum(x < 0.99 for x in ratios)} / {len(ratios)} | {bad} |")
    return out + [""]


def write(rows, md, out):
    os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
    for path, text in ((f"{out}.md", md), (f"{out}.csv", None)):
        tmp = f"{path}.tmp{os.getpid()}"
        with open(tmp, "w", newline="") as f:
            if text is None:
                w = csv.DictWriter(f, COLUMNS)
                w.writeheader()
                w.writerows(rows)
            else:
                f.write(text)
        os.replace(tmp, path)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--work", default="/tmp/pardnn-bench-quality", help="where family profiles are kept")
    p.add_argument("--families", default=",".join(FAMILIES))
    p.add_argument("--size", default="tiny")
    p.add_argument("--synth", type=int, default=20_000, help="nodes of the synthetic graph (0: none)")
    p.add_argument("--k", default="2,4,8,16")
    p.add_argument("--algorithms", default=",".join(algorithms.names()))
    p.add_argument("--fraction", type=float, default=0.6, help="limited capacity, x single-device peak")
    p.add_argument("-o", "--out", default="bench_quality", help="output path without .md/.csv")
    args = p.parse_args(argv)
    print_commit()
    args.families = [f for f in args.families.split(",") if f]
    args.algorithms = [a for a in args.algorithms.split(",") if a]
    args.k = [int(x) for x in args.k.split(",") if x]
    if "pardnn" not in args.algorithms:
        p.error("--algorithms must include pardnn (the summary compares against it)")
    os.makedirs(args.work, exist_ok=True)
    rows = run(args)
    write(rows, markdown(rows, args), args.out)
    print(f"wrote {args.out}.md and {args.out}.csv")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Placement quality of every algorithm on every built-in family (issues #7, #15); writes Markdown and CSV.

    python -m tools.bench_quality [--work DIR] [--families mlp,wrn] [--size tiny] [--synth 20000]
                                  [--k 2,4,8,16] [--algorithms a,b] [--fraction 0.6] [-o docs/bench]
    python -m tools.bench_quality --estimate dgx1-v100,dgx2,dgx-h100,2xdgx-h100 --size real \
                                  [--memory unlimited,real] [--k 2,4,8,16] [--conv-efficiency 0.34] ...

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

With `--estimate PRESETS` (device presets, `NxPRESET` for N hosts) the graphs are
instead estimated profiles (`pardnn profile FAMILY --size SIZE --estimate GPU`, GPU the
preset's, `--conv-efficiency` passed on, kept in --work) placed on K of the preset's
GPUs (K up to its size; on N hosts K/N per host), in two memory settings (--memory): unlimited, and real = the preset's
GPU memory. Each graph's parallelism (total work / critical path) and
communication-to-computation ratio (every edge costed on the preset's mean link, over
total work) are printed, and each row gets ParDNN's speedup over round-robin and its
makespan over the best other placer's (targets: geometric mean >= 2x, every row <= 1.00x).
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import re
import subprocess
import sys


from tools.bench_repair import UNLIMITED, profile_dir, single_peak, sized_cluster

from pardnn.pipeline import place as placer
from pardnn.placers import registry as algorithms
from pardnn.hardware import parse_devices
from pardnn.hardware.gpu_specs import MIN_CONV_EFFICIENCY, check_conv_efficiency
from pardnn.base.errors import UserError
from pardnn.graph.edge_costs import mean_edge_costs
from pardnn.graph.levels import critical_path_us
from pardnn_builtin_models import FAMILIES
from tools.commit_line import csv_comment, print_commit

HERE = os.path.dirname(os.path.abspath(__file__))

COLUMNS = ["graph", "nodes", "preset", "k", "memory", "algorithm", "makespan_us", "speedup", "feasible",
           "comm_bytes", "placement_seconds", "lower_bound_us", "error"]


def graphs(args):
    """(name, CostGraph) for every family profile and the synthetic graph."""
    from tools.synth_graph import synth_graph

    from pardnn.pipeline.load import load_cost_graph
    for family in args.families:
        yield family, load_cost_graph(profile_dir(args.work, family, args.size))[0]
    if args.synth:
        yield f"synth-{args.synth // 1000}k", synth_graph(args.synth, seed=0)


def cpu_cases(args):
    """(graph name, graph, preset, K, memory label, cluster) on K virtual CPUs."""
    for name, graph in graphs(args):
        limited = args.fraction * single_peak(graph)
        for k in args.k:
            yield name, graph, "cpu", k, "unlimited", parse_devices(f"cpu:{k}").with_options(memory=UNLIMITED)
            yield name, graph, "cpu", k, f"{args.fraction:g}x peak", sized_cluster(k, limited)


def estimated_cases(args):
    """The same on K GPUs of each --estimate preset, costs estimated for its GPU."""
    from pardnn.pipeline.load import load_cost_graph
    for family in args.families:
        for preset in args.estimate:
            match = re.fullmatch(r"([0-9]+)x(.+)", preset)
            hosts, single = (int(match.group(1)), match.group(2)) if match else (1, preset)
            graph = load_cost_graph(estimated_dir(args.work, family, args.size, single, args.conv_efficiency))[0]
            full = parse_devices(preset)
            print(graph_stats(family, preset, graph, full), flush=True)
            for k in [k for k in args.k if k <= full.num_devices and k % hosts == 0]:
                cluster = parse_devices(f"{hosts}x{single}:{k // hosts}" if hosts > 1 else f"{single}:{k}")
                for memory in args.memory:
                    yield (family, graph, preset, k, memory,
                           cluster.with_options(memory=UNLIMITED) if memory == "unlimited" else cluster)


def estimated_dir(root, family, size, gpu, conv_efficiency=None):
    """Profile dir of FAMILY --size SIZE estimated for GPU preset `gpu` (convolutions at
    `conv_efficiency` of the rate, if given), made once."""
    share = [] if conv_efficiency is None else ["--conv-efficiency", str(conv_efficiency)]
    path = os.path.join(root, f"{family}-{size}-{gpu}" + (f"-conv{conv_efficiency}" if share else ""))
    if not os.path.isfile(os.path.join(path, "graph.pb")):
        subprocess.run([sys.executable, "-m", "pardnn", "profile", family, "--size", size, "--estimate", gpu,
                        *share, "-o", path], check=True, stdout=subprocess.DEVNULL)
    return path


def graph_stats(name, preset, graph, cluster) -> str:
    """Total work, critical path, parallelism (work / critical path) and CCR (every edge
    costed on the cluster's mean link, over total work) of a graph."""
    work = float(graph.comp_us.sum())
    path = critical_path_us(graph)
    comm = float(mean_edge_costs(graph, cluster).sum())
    return (f"graph {name} on {preset}: {graph.num_nodes} nodes, work {work / 1e3:.1f} ms, critical path "
            f"{path / 1e3:.1f} ms, parallelism {work / path:.2f}, CCR {comm / work:.2f}")


def lower_bound_us(graph, k) -> float:
    """No placement on k devices runs a step faster than max(total work / k, the
    compute-only critical path): the emulator runs one op at a time per device and
    an op starts after its inputs finish. Communication is left out, so it is a bound
    for every placer alike."""
    return max(float(graph.comp_us.sum()) / k, critical_path_us(graph))


def one(name, graph, preset, k, memory, algorithm, cluster) -> dict:
    row = {"graph": name, "nodes": graph.num_nodes, "preset": preset, "k": k, "memory": memory,
           "algorithm": algorithm, "lower_bound_us": round(lower_bound_us(graph, k), 3)}
    try:
        rep = placer.place(graph, cluster, algorithm)[1].to_json()
    except UserError as exc:
        return {**row, "feasible": False, "error": str(exc)}
    return {**row, "makespan_us": round(rep["makespan_us"], 3), "feasible": rep["feasible"],
            "speedup": round(rep["single_device_us"] / rep["makespan_us"], 4),
            "comm_bytes": rep["comm_bytes"], "placement_seconds": round(rep["placement_seconds"], 4)}


def run(args) -> list:
    rows = []
    for name, graph, preset, k, memory, cluster in (estimated_cases(args) if args.estimate else cpu_cases(args)):
        for algorithm in args.algorithms:
            rows.append(one(name, graph, preset, k, memory, algorithm, cluster))
            r = rows[-1]
            print(f"{name:12s} {preset:11s} K={k:<2d} {memory:10s} {algorithm:12s} "
                  f"{r.get('speedup', 'infeasible')}", flush=True)
    return rows


def speedup_cell(r) -> str:
    if not r["feasible"]:
        return "—"
    return f"{r['speedup']:.2f}"


def markdown(rows, args) -> str:
    """One speedup table per memory setting (with ParDNN against round-robin and against
    the best other placer per row), then the targets and each algorithm against ParDNN."""
    out = []
    for memory in dict.fromkeys(r["memory"] for r in rows):
        out += [f"### Memory: {memory}", "",
                "| graph | nodes | devices | K | " + " | ".join(args.algorithms) + " | pardnn vs round-robin "
                "| pardnn / best other | bound vs round-robin |",
                "|---|---:|---|---:|" + "---:|" * (len(args.algorithms) + 3)]
        for (graph, nodes, preset, k), by in table_rows(rows, memory).items():
            best = max((x["speedup"] for x in by.values() if x["feasible"]), default=None)
            marks = [f"**{speedup_cell(by[a])}**" if by[a]["feasible"] and by[a]["speedup"] == best
                     else speedup_cell(by[a]) for a in args.algorithms]
            vs_rr, vs_best = against(by)
            out.append(f"| {graph} | {nodes} | {preset} | {k} | " + " | ".join(marks) +
                       f" | {ratio_cell(vs_rr)} | {ratio_cell(vs_best)} | {ratio_cell(ceiling(by))} |")
        out.append("")
    return "\n".join(out + targets(rows) + summary(rows, args))


def table_rows(rows, memory) -> dict:
    """{(graph, nodes, preset, K): {algorithm: row}} for one memory setting."""
    cells = {}
    for r in rows:
        if r["memory"] == memory:
            cells.setdefault((r["graph"], r["nodes"], r["preset"], r["k"]), {})[r["algorithm"]] = r
    return cells


def against(by) -> tuple:
    """(round-robin makespan / ParDNN's, ParDNN's / the best other feasible placer's);
    None where ParDNN or the other side did not fit."""
    ours = by.get("pardnn")
    if ours is None or not ours["feasible"]:
        return None, None
    rr = by.get("round-robin")
    others = [r["makespan_us"] for a, r in by.items() if a != "pardnn" and r["feasible"]]
    return (rr["makespan_us"] / ours["makespan_us"] if rr is not None and rr["feasible"] else None,
            ours["makespan_us"] / min(others) if others else None)


def ceiling(by):
    """Round-robin's makespan over the row's lower bound: the most any placement could
    gain over round-robin (None without a feasible round-robin or a bound)."""
    rr = by.get("round-robin")
    bound = float(rr.get("lower_bound_us") or 0.0) if rr is not None and rr["feasible"] else 0.0
    return float(rr["makespan_us"]) / bound if bound > 0.0 else None


def geo_mean(values) -> float:
    return math.exp(sum(map(math.log, values)) / len(values)) if values else float("nan")


def ratio_cell(x) -> str:
    return "—" if x is None else f"{x:.2f}x"


def targets(rows) -> list:
    """Per devices and memory setting: geometric mean of ParDNN's speedup over
    round-robin (target >= 2) and the rows where ParDNN is within 1.00x of the best other."""
    out = ["### Targets", "",
           "geo-mean of round-robin makespan / ParDNN's (target >= 2x); rows where ParDNN's "
           "makespan / the best other placer's is <= 1.00 (target: all), and the worst such ratio; "
           "bound: geo-mean of round-robin makespan / the row's lower bound (max(work / K, critical "
           "path)), the most any placer could reach.", "",
           "| devices | memory | rows | vs round-robin (geo-mean) | rows <= 1.00x best other | worst "
           "| bound vs round-robin (geo-mean) |",
           "|---|---|---:|---:|---:|---:|---:|"]
    for memory in dict.fromkeys(r["memory"] for r in rows):
        by_preset = {}
        for (_, _, preset, _), by in table_rows(rows, memory).items():
            by_preset.setdefault(preset, []).append((*against(by), ceiling(by)))
        for preset, triples in by_preset.items():
            rr = [a for a, _, _ in triples if a is not None]
            best = [b for _, b, _ in triples if b is not None]
            bound = [c for a, _, c in triples if a is not None and c is not None]
            out.append(f"| {preset} | {memory} | {len(triples)} | {geo_mean(rr):.2f}x | "
                       f"{sum(b <= 1.005 for b in best)} / {len(best)} | {ratio_cell(max(best, default=None))} "
                       f"| {geo_mean(bound):.2f}x |")
    return out + [""]


def summary(rows, args) -> list:
    """Per algorithm and memory setting: geometric mean of its makespan over ParDNN's
    (> 1: ParDNN faster) where both fit, and how often it could not fit."""
    key = {(r["graph"], (r["preset"], r["k"]), r["memory"], r["algorithm"]): r for r in rows}
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
                out.append(f"| {algorithm} | {memory} | {geo_mean(ratios):.2f} | {min(ratios):.2f} | {max(ratios):.2f} | "
                           f"{sum(x < 0.99 for x in ratios)} / {len(ratios)} | {bad} |")
    return out + [""]


def write(rows, md, out):
    os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
    for path, text in ((f"{out}.md", md), (f"{out}.csv", None)):
        tmp = f"{path}.tmp{os.getpid()}"
        with open(tmp, "w", newline="") as f:
            if text is None:
                f.write(csv_comment())
                w = csv.DictWriter(f, COLUMNS)
                w.writeheader()
                w.writerows(rows)
            else:
                f.write(text)
        os.replace(tmp, path)


def _share(text) -> float:
    """--conv-efficiency as pardnn profile takes it (argparse reports a bad one)."""
    try:
        return check_conv_efficiency(float(text), "--conv-efficiency")
    except (ValueError, UserError):
        raise argparse.ArgumentTypeError(f"cannot use {text!r} (give a share of the peak rate from "
                                         f"{MIN_CONV_EFFICIENCY:g} to 1)") from None


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--work", default="/tmp/pardnn-bench-quality", help="where family profiles are kept")
    p.add_argument("--families", default=",".join(FAMILIES))
    p.add_argument("--size", default="tiny")
    p.add_argument("--synth", type=int, default=20_000, help="nodes of the synthetic graph (0: none)")
    p.add_argument("--k", default="2,4,8,16")
    p.add_argument("--algorithms", default=",".join(algorithms.names()))
    p.add_argument("--fraction", type=float, default=0.6, help="limited capacity, x single-device peak")
    p.add_argument("--estimate", default="", help="device presets whose GPUs cost the graphs "
                   "(e.g. dgx1-v100,dgx2,dgx-h100,2xdgx-h100); default: measured CPU profiles on cpu:K")
    p.add_argument("--memory", default="unlimited,real", help="with --estimate: unlimited and/or real")
    p.add_argument("--conv-efficiency", type=_share, help="with --estimate: passed to pardnn profile (0.01 to 1)")
    p.add_argument("-o", "--out", default="bench_quality", help="output path without .md/.csv")
    args = p.parse_args(argv)
    print_commit()
    args.families = [f for f in args.families.split(",") if f]
    args.algorithms = [a for a in args.algorithms.split(",") if a]
    args.k = [int(x) for x in args.k.split(",") if x]
    args.estimate = [x for x in args.estimate.split(",") if x]
    args.memory = [x for x in args.memory.split(",") if x]
    if set(args.memory) - {"unlimited", "real"}:
        p.error("--memory takes unlimited and/or real")
    if args.conv_efficiency is not None and not args.estimate:
        p.error("--conv-efficiency applies to estimated costs: add --estimate PRESETS")
    if "pardnn" not in args.algorithms:
        p.error("--algorithms must include pardnn (the summary compares against it)")
    os.makedirs(args.work, exist_ok=True)
    rows = run(args)
    write(rows, markdown(rows, args), args.out)
    print(f"wrote {args.out}.md and {args.out}.csv")
    return 0


if __name__ == "__main__":
    sys.exit(main())

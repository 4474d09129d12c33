"""How far pardnn is from the best placement (issue #30): its emulated step over the
proven lower bound and over the best placement any method found; writes CSV and Markdown.

    python -m tools.gap_table [--work DIR] [--families mlp,wrn] [--size tiny] [--synth 120,300]
                              [--k 2,4,8] [--fraction 0.6] [--exact-limit S] [-o docs/gap_table]
    python -m tools.gap_table --render docs/gap_table.csv      # the Markdown table again

Graphs: each built-in family profiled once with `pardnn profile FAMILY --size SIZE
--devices cpu:1` into --work (reused when there), plus small synthetic training-like
graphs (tools/synth_graph.py, seed 0) of the --synth sizes. Each is placed by
`--algorithm pardnn` (pardnn.pipeline.place, as `pardnn place` does) on K virtual CPUs
with unlimited memory and with capacity = --fraction x its single-device peak. Per row:
pardnn's makespan; `lower_bound_us` from its report (docs/bounds.md) and, beside it,
the old max(critical path, work / K); the best emulated step among every candidate the
portfolio built and judged (Step 1, stages, m-ETF, HEFT, METIS, the exact model on small
graphs, linear, m-TOPO, round-robin, one device, refined ones included) and its name; and
the two ratios. An unlimited row's best also counts the limited row's placements, which
fit unlimited memory too. The CSV's first line is the commit it ran on.
"""

from __future__ import annotations

import argparse
import csv
import os
import sys


from tools.bench_repair import UNLIMITED, profile_dir, single_peak, sized_cluster
from tools.commit_line import commit_line, print_commit

from pardnn.base.errors import UserError
from pardnn.graph.levels import critical_path_us
from pardnn.hardware import parse_devices
from pardnn_builtin_models import FAMILIES
from pardnn.pipeline import place as placer
from pardnn.placers import exact

HERE = os.path.dirname(os.path.abspath(__file__))

COLUMNS = ["graph", "nodes", "k", "memory", "makespan_us", "lower_bound_us", "old_bound_us", "exact_ran",
           "best_us", "best_by", "over_bound", "over_best", "placement_seconds", "error"]


def graphs(args):
    """(name, CostGraph) for each family profile and each synthetic size."""
    from tools.synth_graph import synth_graph

    from pardnn.pipeline.load import load_cost_graph
    for family in args.families:
        yield f"{family} {args.size}", load_cost_graph(profile_dir(args.work, family, args.size))[0]
    for n in args.synth:
        yield f"synth {n}", synth_graph(n, seed=0)


def best_candidate(report) -> tuple:
    """(makespan, name) of the fastest feasible placement the portfolio judged."""
    found = [(report["makespan_us"], "pardnn")]
    for name, c in report.get("candidates", {}).items():
        if c.get("feasible") and c.get("makespan_us") is not None:
            found.append((c["makespan_us"], name))
        if c.get("refined_makespan_us") is not None:
            found.append((c["refined_makespan_us"], f"{name} refined"))
    return min(found)


def row(name, graph, k, memory, cluster) -> dict:
    out = {"graph": name, "nodes": graph.num_nodes, "k": k, "memory": memory,
           "old_bound_us": round(max(critical_path_us(graph), graph.total_work_us() / k), 3),
           "exact_ran": exact.applies(graph, cluster)}
    try:
        rep = placer.place(graph, cluster, "pardnn")[1].to_json()
    except UserError as exc:
        return {**out, "error": str(exc)}
    best, by = best_candidate(rep)
    return {**out, "makespan_us": round(rep["makespan_us"], 3), "lower_bound_us": round(rep["lower_bound_us"], 3),
            "best_us": round(best, 3), "best_by": by,
            "over_bound": round(rep["makespan_us"] / rep["lower_bound_us"], 4),
            "over_best": round(rep["makespan_us"] / best, 4), "placement_seconds": round(rep["placement_seconds"], 2)}


def with_best_of(free, tight) -> dict:
    """The unlimited row, its best taken over the limited row's placements too (each
    of them fits unlimited memory as well)."""
    if free.get("error") or tight.get("error") or tight["best_us"] >= free["best_us"]:
        return free
    return {**free, "best_us": tight["best_us"], "best_by": f"{tight['best_by']} ({tight['memory']})",
            "over_best": round(free["makespan_us"] / tight["best_us"], 4)}


def markdown(rows, commit) -> str:
    lines = [f"Measured at {commit}.", "",
             "| graph | nodes | K | memory | pardnn | lower bound | old bound | exact model ran | pardnn / bound "
             "| best of any method | pardnn / best |",
             "|---|---:|---:|---|---:|---:|---:|---|---:|---|---:|"]
    for r in rows:
        head = f"| {r['graph']} | {r['nodes']} | {r['k']} | {r['memory']} |"
        if r.get("error"):
            lines.append(f"{head} infeasible: {r['error'][:80]}... | | | | | | |")
            continue
        lines.append(f"{head} {float(r['makespan_us']):.1f} us | {float(r['lower_bound_us']):.1f} us | "
                     f"{float(r['old_bound_us']):.1f} us | {'yes' if str(r['exact_ran']) == 'True' else 'no'} | "
                     f"{float(r['over_bound']):.3f} | {float(r['best_us']):.1f} us ({r['best_by']}) | "
                     f"{float(r['over_best']):.3f} |")
    return "\n".join(lines) + "\n"


def render(path) -> str:
    """The Markdown table of a CSV this tool wrote (its first line names the commit)."""
    with open(path, newline="") as f:
        commit = f.readline().lstrip("# ").strip()
        return markdown(list(csv.DictReader(f)), commit)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--work", default="/tmp/pardnn-gap", help="profile directory (reused)")
    p.add_argument("--families", default=",".join(FAMILIES))
    p.add_argument("--size", default="tiny")
    p.add_argument("--synth", default="120,300", help="synthetic graph sizes (nodes), comma-separated")
    p.add_argument("--k", default="2,4,8")
    p.add_argument("--fraction", type=float, default=0.6, help="limited capacity, x single-device peak")
    p.add_argument("-o", "--out", default="docs/gap_table", help="writes OUT.csv and OUT.md")
    p.add_argument("--render", metavar="CSV", help="only print the Markdown table of a CSV written before")
    p.add_argument("--exact-limit", type=float, metavar="SECONDS",
                   help="the exact model's CP-SAT deterministic seconds on every graph, instead of "
                        "exact.deterministic_limit's (in proportion to the graph); to measure what it buys")
    args = p.parse_args(argv)
    if args.render:
        print(render(args.render), end="")
        return 0
    if args.exact_limit is not None:
        exact.deterministic_limit = lambda num_nodes: args.exact_limit
    args.families = [f for f in args.families.split(",") if f]
    args.synth = [int(n) for n in args.synth.split(",") if n]
    print_commit()
    commit = commit_line()
    rows = []
    for name, graph in graphs(args):
        limited = args.fraction * single_peak(graph)
        for k in (int(x) for x in args.k.split(",")):
            free = row(name, graph, k, "unlimited", parse_devices(f"cpu:{k}").with_options(memory=UNLIMITED))
            tight = row(name, graph, k, f"{args.fraction:g}x peak", sized_cluster(k, limited))
            rows += [with_best_of(free, tight), tight]
            for r in rows[-2:]:
                print(" ".join(f"{c}={r.get(c, '')}" for c in COLUMNS if r.get(c, "") != ""), flush=True)
    with open(args.out + ".csv", "w", newline="") as f:
        f.write(f"# {commit}\n")
        writer = csv.DictWriter(f, COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    with open(args.out + ".md", "w") as f:
        f.write(markdown(rows, commit))
    return 0


if __name__ == "__main__":
    sys.exit(main())

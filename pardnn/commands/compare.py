"""`pardnn compare PROFILE --devices SPEC [--algorithms a,b,c] [--json] [--plot F.png]`:
run several placers on one graph and judge each with the emulator.

One row per algorithm: emulated makespan, speedup over one device
(`single_device_us / makespan_us`, the emulator's step time with everything on
one device), each device's peak memory as a percentage of its capacity, whether
every device fits, bytes communicated per step, and the placer's own wall time.
A placer that cannot meet the memory limit (the emulated peak exceeds capacity, or
the placer itself refuses with a UserError) shows as infeasible; the command goes
on with the others and exits 0 (infeasible rows are a result, not bad input). The
table lists each refusal's reason once below the rows; --json puts it in "error".
"""

import json
import os
import sys

from pardnn.pipeline import place as placer
from pardnn.placers import registry as algorithms
from pardnn.commands.common import (add_budget_arg, add_cluster_args, budget_from_args, check_output_file,
                                    cluster_from_args, cluster_inputs)
from pardnn.base.errors import UserError
from pardnn.pipeline.load import load_cost_graph
from pardnn.base.units import format_size, format_time


def add_parser(sub):
    p = sub.add_parser("compare", help="compare placement algorithms on one graph",
                       description="Place one graph with several algorithms and compare the emulated results.")
    p.add_argument("profile", metavar="PROFILE", help="profile directory or cost graph .json")
    add_cluster_args(p)
    add_budget_arg(p)
    p.add_argument("--algorithms", metavar="A,B,C",
                   help=f"comma-separated algorithms (default: all of {', '.join(algorithms.names())})")
    p.add_argument("--json", action="store_true", help="print the results as JSON instead of a table")
    p.add_argument("--plot", metavar="FILE.png", help="also draw the makespans as a bar chart")
    p.set_defaults(run=run)


def run(args):
    cluster = cluster_from_args(args)
    names = parse_algorithms(args.algorithms)
    budget_s = budget_from_args(args)
    check_output_file("--plot", args.plot, [args.profile, *cluster_inputs(args)])
    if args.plot and not args.plot.lower().endswith(".png"):
        raise UserError(f"--plot: {args.plot} must end in .png")
    graph, _ = load_cost_graph(args.profile)
    rows = compare(graph, cluster, names, budget_s)
    if args.json:
        doc = {"profile": str(args.profile), "num_nodes": graph.num_nodes, "num_edges": graph.num_edges,
               "devices": cluster.names, "capacity_bytes": [int(x) for x in cluster.capacity],
               "results": rows}
        json.dump(doc, sys.stdout, indent=2)
        print()
    else:
        print(format_table(rows, graph, cluster))
    if args.plot:
        plot(rows, args.plot)
    return 0


def parse_algorithms(text) -> list:
    """The algorithm names in `--algorithms` (all registered ones when None)."""
    if text is None:
        return algorithms.names()
    names = [x.strip() for x in text.split(",") if x.strip()]
    if not names:
        raise UserError("--algorithms: no algorithm named")
    for name in names:
        if name not in algorithms.names():
            raise UserError(f"--algorithms: unknown algorithm {name!r} "
                            f"(choose from {', '.join(algorithms.names())})")
    return list(dict.fromkeys(names))


def compare(graph, cluster, names, budget_s=None) -> list:
    """One result dict per algorithm; a placer's UserError becomes an infeasible row."""
    rows = []
    for name in names:
        try:
            _, report = placer.place(graph, cluster, name, budget_s)
        except UserError as exc:
            rows.append({"algorithm": name, "feasible": False, "error": str(exc)})
            continue
        makespan = report.makespan_us
        rows.append({
            "algorithm": name,
            "makespan_us": makespan,
            "speedup": report.single_device_us / makespan if makespan > 0 else 1.0,
            "peak_memory_bytes": report.peak_memory_bytes,
            "feasible": report.feasible,
            "comm_bytes": report.comm_bytes,
            "placement_seconds": report.placement_seconds,
            **({"candidate": report.candidate} if report.candidate is not None else {}),
        })
    return rows


def format_table(rows, graph, cluster) -> str:
    capacity = cluster.capacity
    header = ["algorithm", "makespan", "speedup", "peak memory, % of capacity per device",
              "feasible", "communicated", "placement time"]
    host = cluster.host_device
    others = [int(c) for i, c in enumerate(capacity) if i != host] or [int(capacity.min())]
    beside = f", the host {format_size(capacity[host])}" if host >= 0 else ""
    lines = [f"{graph.num_nodes} nodes, {graph.num_edges} edges on {cluster.num_devices} devices, "
             f"capacity {format_size(min(others))} per device{beside} (reserve {cluster.reserve:.0%})"]
    table = []
    for r in rows:
        if "error" in r:
            table.append([r["algorithm"], "-", "-", "-", "NO (cannot fit)", "-", "-"])
            continue
        peaks = "/".join(f"{100 * p / c:.0f}" if c > 0 else "inf"
                         for p, c in zip(r["peak_memory_bytes"], capacity.tolist()))
        table.append([r["algorithm"], format_time(r["makespan_us"]), f"{r['speedup']:.2f}x", peaks,
                      "yes" if r["feasible"] else "NO (infeasible)", format_size(r["comm_bytes"]),
                      f"{r['placement_seconds']:.2f} s"])
    widths = [max(len(str(row[i])) for row in [header] + table) for i in range(len(header))]
    for row in [header] + table:
        lines.append("  ".join(str(x).ljust(w) for x, w in zip(row, widths)).rstrip())
    reasons = {}
    for r in rows:
        if "error" in r:
            reasons.setdefault(r["error"], []).append(r["algorithm"])
    lines += [f"{', '.join(who)}: {why}" for why, who in reasons.items()]
    return "\n".join(lines)


def plot(rows, path):
    """Bar chart of makespan per algorithm (infeasible ones hatched), written via a
    temporary file and a rename."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    ok = [r for r in rows if "makespan_us" in r]
    fig, ax = plt.subplots(figsize=(1.2 * max(len(ok), 3) + 1, 4))
    bars = ax.bar([r["algorithm"] for r in ok], [r["makespan_us"] / 1e3 for r in ok],
                  color=["tab:blue" if r["feasible"] else "tab:red" for r in ok])
    for bar, r in zip(bars, ok):
        if not r["feasible"]:
            bar.set_hatch("//")
        ax.annotate(f"{r['speedup']:.2f}x", (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                    ha="center", va="bottom", fontsize=8)
    ax.set_ylabel("emulated step time (ms)")
    ax.set_title("makespan per algorithm\n(red, hatched: over memory; label: speedup over one device)",
                 fontsize=9)
    fig.tight_layout()
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        fig.savefig(tmp, format="png", dpi=120)
        os.replace(tmp, path)
    except OSError as exc:
        raise UserError(f"--plot: cannot write {path} ({exc.strerror})") from None
    finally:
        plt.close(fig)
        if os.path.exists(tmp):
            os.remove(tmp)

"""`pardnn emulate PROFILE --placement placement.csv --devices SPEC`: a dry run.

Emulates one training step of a placed graph (pardnn.emulator) and prints, per device,
the busy time, the utilisation (busy / step time) and the peak memory against the
capacity. `--report` writes the same report.json fields `pardnn place` writes (the
emulation fields agree exactly for the same placement); `--plot` draws the memory and
busy/idle timeline of every device (pardnn.emulator.timeline_plot); `--trace` writes
the step as a Chrome Trace Event file for Perfetto or TensorBoard's trace viewer
(pardnn.io.trace_events). A micro-batched placement carries an order (order.csv):
`--schedule NAME`, its report.json's `schedule`, emulates it (pardnn.pipeline.schedule's
list schedule, which the order's control edges reproduce). Output files are written
all or nothing.
"""

import os
import time

from pardnn.commands.common import (add_cluster_args, check_output_files, cluster_from_args, cluster_inputs,
                                    write_all_or_nothing)
from pardnn.graph.constraints import violations
from pardnn.emulator.memory import track_memory
from pardnn.emulator.scheduler import simulate
from pardnn.base.errors import UserError
from pardnn.pipeline.load import load_cost_graph
from pardnn.pipeline.recompute import placed_graph
from pardnn.io.placement import read_csv
from pardnn.pipeline.report import emulation_report, samples_per_step
from pardnn.pipeline.schedule import SCHEDULES, ranks
from pardnn.emulator.trace import emulated_step
from pardnn.io.trace_events import short_names, write_trace
from pardnn.base.jsonfile import write_json
from pardnn.base.units import format_size, format_time


def add_parser(sub):
    p = sub.add_parser("emulate", help="emulate a placed training step (dry run)",
                       description="Emulate one training step of a placement: step time, "
                                   "per-device utilisation and peak memory.")
    p.add_argument("profile", metavar="PROFILE", help="profile directory or cost graph .json")
    p.add_argument("--placement", required=True, metavar="CSV", help="placement.csv (node,device)")
    add_cluster_args(p)
    p.add_argument("--schedule", default="fifo", metavar="NAME",
                   help=f"the order a micro-batched placement carries (its report.json's `schedule`): "
                        f"{', '.join(SCHEDULES)}; default fifo, TF's own")
    p.add_argument("--report", metavar="FILE", help="write report.json here")
    p.add_argument("--plot", metavar="PNG", help="write the memory/busy timeline here")
    p.add_argument("--trace", metavar="JSON", help="write the step as a trace (Perfetto, chrome://tracing, "
                                                   "TensorBoard's trace viewer) here")
    p.set_defaults(run=run)


def run(args):
    cluster = cluster_from_args(args)
    if args.schedule not in SCHEDULES:
        raise UserError(f"--schedule: unknown schedule {args.schedule!r} (choose from {', '.join(SCHEDULES)})")
    check_output_files([args.profile, args.placement, *cluster_inputs(args)],
                       **{"--report": args.report, "--plot": args.plot, "--trace": args.trace})
    loaded, info = load_cost_graph(args.profile)
    graph = placed_graph(loaded, args.placement)                # with its recomputed copies
    device = read_csv(args.placement, graph, cluster)
    problems = violations(graph, cluster, device)
    if problems:
        raise UserError(f"--placement: {args.placement}: {problems[0]}")
    t0 = time.perf_counter()
    schedule = simulate(graph, cluster, device, ranks(graph, args.schedule))     # the list schedule order.csv carries
    profile = track_memory(graph, cluster, device, schedule)
    report = emulation_report(graph, cluster, device, schedule, profile, "placement.csv",
                              samples=samples_per_step(info.get("profile")), placement=os.path.abspath(args.placement))
    report.stage_seconds = {"evaluate": time.perf_counter() - t0}
    report = report.to_json()
    about = {"pardnn": "emulated step", "placement": report["placement"], "devices": args.devices}
    _write(args, report, lambda path: _plot(schedule, profile, cluster, device, args, path),
           lambda path: write_trace(path, emulated_step(graph, cluster, device, schedule, profile), about))
    print_table(report, cluster)
    return 0


def _plot(schedule, profile, cluster, device, args, path):
    from pardnn.emulator.timeline_plot import plot_timeline
    plot_timeline(schedule, profile, cluster, device, path,
                  title=f"{os.path.basename(args.placement)} on {args.devices}")


def _write(args, report, plot, trace):
    """Write --plot, --trace and --report through temporary files; rename them only
    if all worked."""
    writers = [(args.plot, plot), (args.trace, trace),
               (args.report, lambda path: write_json(report, path))]
    write_all_or_nothing([(path, write) for path, write in writers if path])


def print_table(report, cluster, file=None):
    """Per-device busy time, utilisation and peak memory against capacity."""
    span = report["makespan_us"]
    names = short_names(report["devices"])        # whole names where hosts share short ones
    width = max(28, *map(len, names))
    lines = [f"emulated step {format_time(span)} on {len(report['devices'])} devices; "
             f"one device {format_time(report['single_device_us'])} "
             f"(speedup {report['single_device_us'] / span if span else 1.0:.2f}x), "
             f"lower bound {format_time(report['lower_bound_us'])}"
             + (f" (gap {span / report['lower_bound_us']:.3f}x)" if report["lower_bound_us"] > 0 else ""),
             f"{'device':<{width}} {'nodes':>8} {'busy':>12} {'util':>6} {'peak memory':>12} "
             f"{'capacity':>12} {'use':>6}"]
    capacity = cluster.capacity.tolist()
    for i, name in enumerate(names):
        busy, peak = report["busy_us"][i], report["peak_memory_bytes"][i]
        lines.append(f"{name:<{width}} {report['nodes_per_device'][i]:>8} "
                     f"{format_time(busy):>12} {busy / span if span else 0:>6.0%} "
                     f"{format_size(peak):>12} {format_size(capacity[i]):>12} "
                     f"{peak / capacity[i] if capacity[i] else float('inf'):>6.0%}")
    lines.append(f"memory: {'fits' if report['feasible'] else 'DOES NOT FIT'} "
                 f"(reserve {report['reserve']:.0%}); communication {format_size(report['comm_bytes'])} per step")
    print("\n".join(lines), file=file)

"""`pardnn place PROFILE --devices SPEC -o OUT_DIR`: place a profiled graph.

Writes OUT_DIR/placement.csv, OUT_DIR/report.json, OUT_DIR/trace.json (the emulated
step, pardnn.io.trace_events), OUT_DIR/tensorboard/ (the placed graph,
pardnn.io.tensorboard_graph) and, when PROFILE is a profile directory,
OUT_DIR/placed_graph.pb, all or nothing; and OUT_DIR/inputs.json, what it was placed
from (the profile's path and the flags that made the cluster), so that `pardnn explain
OUT_DIR` can emulate the same step again. `--explain` prints that explanation at the end.
The flow is pardnn.pipeline.place_dir's, which pardnn.keras.plan runs in-process.
"""

from pardnn.commands.common import (add_budget_arg, add_cluster_args, add_fetch_arg, add_memory_order_arg,
                                   add_recompute_arg, budget_from_args, cluster_from_args, cluster_inputs,
                                   refuse_below_least_memory)
from pardnn.io.outputs import OutputDir, check_output_dir
from pardnn.io.summary import print_summary
from pardnn.pipeline import replicas
from pardnn.pipeline.place_dir import place_inputs, place_profile, write_place_dir
from pardnn.pipeline.recompute import recompute_line
from pardnn.pipeline.schedule import SCHEDULES, schedule_line
from pardnn.placers import registry as algorithms
from pardnn.base.errors import UserError
from pardnn.base.units import format_size
from pardnn.base.progress import stage


def add_parser(sub):
    p = sub.add_parser("place", help="place a profiled graph on devices",
                       description="Place a profiled graph (profile dir or cost graph .json) on devices.")
    p.add_argument("profile", metavar="PROFILE", help="profile directory or cost graph .json")
    add_cluster_args(p)
    p.add_argument("--algorithm", default="pardnn", metavar="NAME",
                   help=f"placement algorithm ({', '.join(algorithms.names())}); default pardnn")
    add_budget_arg(p)
    p.add_argument("--replicas", type=int, metavar="R",
                   help="data parallelism: place on the first host's devices, replicate on R hosts "
                        "with gradients averaged (docs/multihost.md)")
    p.add_argument("--schedule", default="auto", metavar="NAME",
                   help="a step of micro-batches (`pardnn profile --micro-batches`): the order it carries, "
                        f"auto (the fastest that fits, default) or one of {', '.join(SCHEDULES)}")
    add_recompute_arg(p)
    add_memory_order_arg(p)
    add_fetch_arg(p)
    p.add_argument("-o", "--out", required=True, metavar="OUT_DIR", help="output directory")
    p.add_argument("--explain", action="store_true",
                   help="end with `pardnn explain`'s summary: what sets the step and fills memory, by layer")
    p.set_defaults(run=run)


def run(args):
    cluster = cluster_from_args(args)
    algorithms.candidates(args.algorithm)   # reject a bad name before loading anything
    budget_s = budget_from_args(args)
    if args.schedule not in ("auto",) + SCHEDULES:
        raise UserError(f"--schedule: unknown schedule {args.schedule!r} (choose from auto, {', '.join(SCHEDULES)})")
    check_output_dir(args.out, inputs=[args.profile, *cluster_inputs(args)])
    placed = place_profile(args.profile, cluster, args.algorithm, budget_s, args.replicas, args.devices,
                           check=lambda graph, placed_on: refuse_below_least_memory(graph, placed_on, args),
                           schedule=args.schedule, recompute=args.recompute, fetch=args.host_fetch,
                           order=args.memory_order)
    with stage(f"writing {args.out}"), OutputDir(args.out) as out:
        report = write_place_dir(out, placed, placed_inputs(args)).to_json()
    print_summary(report, out_dir=args.out)
    if "schedule" in report:
        print(schedule_line(report))
    if "recompute" in report:
        print(recompute_line(report))
    if "host_fetch" in report:
        print(f"  host fetch: {report['host_fetch']['reads']} weights "
              f"({format_size(report['host_fetch']['bytes'])}) read again for the backward pass, "
              f"the reads ordered by {report['host_fetch']['control_edges']} control edges")
    if args.replicas is not None:
        print(replicas.summary_line(report["replicas"]))
    if placed.loader.get("untimed_nodes"):
        print(f"  note: {placed.loader['untimed_nodes']} nodes had no timing in the profile "
              f"(zero compute time, static output sizes)")
    if args.explain:
        from pardnn.commands.explain import explain_placement
        explain_placement(args.out, placed.graph, placed.info, placed.placement, report, placed_inputs(args))
    return 0


def placed_inputs(args, devices=None, memory=None) -> dict:
    """inputs.json of this command's flags (pardnn.pipeline.place_dir.place_inputs);
    `devices`, `memory`: other values than the flags' (`pardnn capacity`'s counts)."""
    return place_inputs(args.profile, devices or args.devices, memory or args.memory, args.reserve, args.bandwidth,
                        args.latency, args.algorithm, getattr(args, "time_budget", None),
                        getattr(args, "replicas", None), host_memory=args.host_memory)

"""`pardnn place PROFILE --devices SPEC -o OUT_DIR`: place a profiled graph.

Writes OUT_DIR/placement.csv, OUT_DIR/report.json, OUT_DIR/trace.json (the emulated
step, pardnn.io.trace_events), OUT_DIR/tensorboard/ (the placed graph,
pardnn.io.tensorboard_graph) and, when PROFILE is a profile directory,
OUT_DIR/placed_graph.pb, all or nothing; and OUT_DIR/inputs.json, what it was placed
from (the profile's path and the flags that made the cluster), so that `pardnn explain
OUT_DIR` can emulate the same step again. `--explain` prints that explanation at the end.
"""

import os

import time

from pardnn.graph.averaging import check_averaged
from pardnn.hardware.hosts import replica_cluster
from pardnn.pipeline import place as placer, replicas
from pardnn.placers import registry as algorithms
from pardnn.commands.common import (add_budget_arg, add_cluster_args, budget_from_args, cluster_from_args,
                                   cluster_inputs, refuse_below_least_memory)
from pardnn.pipeline.load import load_cost_graph
from pardnn.pipeline.report import placement_report
from pardnn.io.outputs import OutputDir, check_output_dir
from pardnn.progress import stage
from pardnn.jsonfile import write_json
from pardnn.io.summary import print_summary
from pardnn.io.tensorboard_graph import graph_def_bytes, write_graph_logdir
from pardnn.emulator.trace import emulated_step
from pardnn.io.trace_events import write_trace

# Loader statistics copied into report.json under "loader".
LOADER_FIELDS = ("steps", "untimed_nodes", "outside_step_nodes",
                 "unknown_stats_records", "dropped_back_edges", "pinned_cpu", "fusions", "fused_timed_nodes")


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
    p.add_argument("-o", "--out", required=True, metavar="OUT_DIR", help="output directory")
    p.add_argument("--explain", action="store_true",
                   help="end with `pardnn explain`'s summary: what sets the step and fills memory, by layer")
    p.set_defaults(run=run)


def run(args):
    cluster = cluster_from_args(args)
    algorithms.candidates(args.algorithm)   # reject a bad name before loading anything
    budget_s = budget_from_args(args)
    check_output_dir(args.out, inputs=[args.profile, *cluster_inputs(args)])
    one_replica = cluster if args.replicas is None else replica_cluster(cluster, args.replicas)
    t0 = time.perf_counter()
    with stage(f"loading {args.profile}"):
        graph, info = load_cost_graph(args.profile)
    load_s = time.perf_counter() - t0
    if args.replicas is not None:
        check_averaged(graph, args.profile)
    refuse_below_least_memory(graph, one_replica, args)
    with stage(f"placing {graph.num_nodes} nodes with {args.algorithm} on {cluster.num_devices} devices"):
        placed = placer.run_placement(graph, one_replica, args.algorithm, budget_s)
    loader = {key: info[key] for key in LOADER_FIELDS if key in info}

    def report_of(write_s):
        return placement_report(graph, placed, loader, None if args.replicas is None else (cluster, args.replicas),
                                {"load": load_s, "write": write_s})
    with stage(f"writing {args.out}"):
        report = _write_outputs(args, graph, info, placed.placement, cluster, report_of).to_json()
    print_summary(report, out_dir=args.out)
    if args.replicas is not None:
        print(replicas.summary_line(report["replicas"]))
    if loader.get("untimed_nodes"):
        print(f"  note: {loader['untimed_nodes']} nodes had no timing in the profile "
              f"(zero compute time, static output sizes)")
    if args.explain:
        from pardnn.commands.explain import explain_placement
        explain_placement(args.out, graph, info, placed.placement, report, placed_inputs(args))
    return 0


def placed_inputs(args, devices=None, memory=None) -> dict:
    """inputs.json: the profile (absolute path) and the flags `pardnn explain` needs to
    build the same cluster and emulate the same step again (a cluster file by its
    absolute path). `devices`, `memory`: other values than the command's flags."""
    devices = devices or (os.path.abspath(args.devices) if cluster_inputs(args) else args.devices)
    return {"format": "pardnn-place-inputs", "version": 1, "profile": os.path.abspath(args.profile),
            "devices": devices, "memory": memory or args.memory, "reserve": args.reserve,
            "bandwidth": args.bandwidth, "latency": args.latency, "algorithm": args.algorithm,
            "time_budget": getattr(args, "time_budget", None), "replicas": getattr(args, "replicas", None)}


def _write_outputs(args, graph, info, placement, cluster, report_of):
    """placement.csv, placed_graph.pb (profile dirs only), profile.json, trace.json,
    tensorboard/, inputs.json, then report.json: `report_of(seconds the others took to
    write)`, which it returns."""
    with OutputDir(args.out) as out:
        t1 = time.perf_counter()
        write_placed(out, graph, info, placement, cluster, args.algorithm, args.devices, args.replicas)
        write_json(placed_inputs(args), out.temp("inputs.json"))
        report = report_of(time.perf_counter() - t1)
        write_json(report.to_json(), out.temp("report.json"))
    return report


def write_placed(out, graph, info, placement, cluster, algorithm, devices, replicas=None, prefix="", views=True):
    """A placed dir's files under `prefix` in the OutputDir `out`: placement.csv,
    placed_graph.pb and profile.json (profile dirs only: what `pardnn run` reads), and
    with `views` trace.json and tensorboard/."""
    placement.write_csv(graph, out.temp(prefix + "placement.csv"))
    placed_pb = None
    if info.get("profile_dir"):
        placed_pb = out.temp(prefix + "placed_graph.pb")
        if replicas is None:
            from pardnn.tf.placed_graph import write_placed_graph
            write_placed_graph(info["profile_dir"], graph, placement, placed_pb)
        else:
            from pardnn.tf.replicate import write_replicated_graph
            write_replicated_graph(info["profile_dir"], graph, placement, cluster, replicas,
                                   info.get("profile", {}), placed_pb)
        if "profile" in info:       # lets `pardnn run OUT_DIR` rebuild the model's feeds
            write_json(info["profile"], out.temp(prefix + "profile.json"))
    if views:
        _write_views(algorithm, devices, graph, placement, placed_pb, out, prefix)


def _write_views(algorithm, devices, graph, placement, placed_graph, out, prefix=""):
    """trace.json, the emulated step the report judged (placement.schedule and .profile),
    and tensorboard/ with `placed_graph` (a placed_graph.pb) or, without one, a GraphDef
    made from the cost graph."""
    cluster, device = placement.cluster, placement.device
    write_trace(out.temp(prefix + "trace.json"), emulated_step(graph, cluster, device, placement.schedule,
                                                               placement.profile),
                {"pardnn": "emulated step", "algorithm": algorithm, "devices": devices})
    if placed_graph is None:
        graph_def = graph_def_bytes(graph, cluster.names, device)
    else:
        with open(placed_graph, "rb") as f:
            graph_def = f.read()
    write_graph_logdir(out.temp(prefix + "tensorboard"), graph_def)

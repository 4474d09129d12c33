"""`pardnn place PROFILE --devices SPEC -o OUT_DIR`: place a profiled graph.

Writes OUT_DIR/placement.csv, OUT_DIR/report.json, OUT_DIR/trace.json (the emulated
step, pardnn.io.trace_events), OUT_DIR/tensorboard/ (the placed graph,
pardnn.io.tensorboard_graph) and, when PROFILE is a profile directory,
OUT_DIR/placed_graph.pb, all or nothing.
"""

import time

from pardnn.graph.averaging import check_averaged
from pardnn.hardware.hosts import replica_cluster
from pardnn.pipeline import place as placer, replicas
from pardnn.placers import registry as algorithms
from pardnn.commands.common import (add_budget_arg, add_cluster_args, budget_from_args, cluster_from_args,
                                   cluster_inputs, refuse_below_least_memory)
from pardnn.pipeline.load import load_cost_graph
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
        placement, report = placer.place(graph, one_replica, args.algorithm, budget_s)
    report["stage_seconds"] = {"load": load_s, **report["stage_seconds"]}
    if args.replicas is not None:
        report["replicas"] = replicas.estimate(graph, placement.device, cluster, args.replicas,
                                               report["makespan_us"])
    loader = {key: info[key] for key in LOADER_FIELDS if key in info}
    if loader:
        report["loader"] = loader
    with stage(f"writing {args.out}"):
        _write_outputs(args, graph, info, placement, cluster, report)
    print_summary(report, out_dir=args.out)
    if args.replicas is not None:
        print(replicas.summary_line(report["replicas"]))
    if loader.get("untimed_nodes"):
        print(f"  note: {loader['untimed_nodes']} nodes had no timing in the profile "
              f"(zero compute time, static output sizes)")
    return 0


def _write_outputs(args, graph, info, placement, cluster, report):
    """placement.csv, placed_graph.pb (profile dirs only), profile.json, trace.json,
    tensorboard/ and report.json."""
    with OutputDir(args.out) as out:
        write_placement(out, graph, info, placement, cluster, report, args.algorithm, args.devices,
                        replicas=args.replicas)


def write_placement(out, graph, info, placement, cluster, report, algorithm, devices, replicas=None,
                    prefix="", views=True):
    """A placed dir's files under `prefix` in the OutputDir `out`: placement.csv,
    placed_graph.pb and profile.json (profile dirs only: what `pardnn run` reads),
    with `views` trace.json and tensorboard/, and report.json (its stage_seconds
    gains `write`)."""
    t1 = time.perf_counter()
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
    report["stage_seconds"]["write"] = time.perf_counter() - t1
    write_json(report, out.temp(prefix + "report.json"))


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

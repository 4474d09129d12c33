"""The `pardnn place` flow as functions: place a PROFILE (`place_profile`) and write the
output folder (`write_place_dir`): placement.csv, report.json, trace.json (the emulated
step, pardnn.io.trace_events), tensorboard/ (the placed graph,
pardnn.io.tensorboard_graph) and, when PROFILE is a profile directory, placed_graph.pb
and profile.json. The `place` command and pardnn.keras.plan (in-process) run the
same code, so `pardnn emulate`, `run` and the views read either's folder alike.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from pardnn.emulator.trace import emulated_step
from pardnn.graph.averaging import check_averaged
from pardnn.hardware.hosts import replica_cluster
from pardnn.io.tensorboard_graph import graph_def_bytes, write_graph_logdir
from pardnn.io.trace_events import write_trace
from pardnn.jsonfile import write_json
from pardnn.pipeline import place as placer, replicas as replica_estimate
from pardnn.pipeline.load import load_cost_graph
from pardnn.progress import stage

# Loader statistics copied into report.json under "loader".
LOADER_FIELDS = ("steps", "untimed_nodes", "outside_step_nodes",
                 "unknown_stats_records", "dropped_back_edges", "pinned_cpu", "fusions", "fused_timed_nodes")


@dataclass
class PlacedProfile:
    """A placed PROFILE: what `write_place_dir` writes."""

    graph: object               # the CostGraph
    info: dict                  # the loader's statistics (pipeline.load.load_cost_graph)
    placement: object           # pardnn.io.placement.Placement
    report: dict                # report.json
    cluster: object             # the cluster asked for (all hosts with replicas)
    algorithm: str
    devices: str                # the --devices text, for the trace's metadata
    replicas: int | None = None


def place_profile(profile, cluster, algorithm="pardnn", budget_s=None, replicas=None,
                  devices="") -> PlacedProfile:
    """Load `profile` (a profile dir or cost graph JSON) and place it on `cluster` with
    `algorithm` (pipeline.place.place; `budget_s` caps the portfolio); with `replicas`,
    on the first host's devices, replicated on R hosts (docs/multihost.md)."""
    one_replica = cluster if replicas is None else replica_cluster(cluster, replicas)
    t0 = time.perf_counter()
    with stage(f"loading {profile}"):
        graph, info = load_cost_graph(profile)
    load_s = time.perf_counter() - t0
    if replicas is not None:
        check_averaged(graph, profile)
    with stage(f"placing {graph.num_nodes} nodes with {algorithm} on {cluster.num_devices} devices"):
        placement, report = placer.place(graph, one_replica, algorithm, budget_s)
    report["stage_seconds"] = {"load": load_s, **report["stage_seconds"]}
    if replicas is not None:
        report["replicas"] = replica_estimate.estimate(graph, placement.device, cluster, replicas,
                                                       report["makespan_us"])
    loader = {key: info[key] for key in LOADER_FIELDS if key in info}
    if loader:
        report["loader"] = loader
    return PlacedProfile(graph, info, placement, report, cluster, algorithm, str(devices), replicas)


def write_place_dir(out, placed: PlacedProfile) -> None:
    """The place outputs into `out`, an entered pardnn.io.outputs.OutputDir:
    placement.csv, placed_graph.pb and profile.json (profile dirs only), trace.json,
    tensorboard/ and report.json."""
    graph, info, placement, report = placed.graph, placed.info, placed.placement, placed.report
    t1 = time.perf_counter()
    placement.write_csv(graph, out.temp("placement.csv"))
    placed_pb = None
    if info.get("profile_dir"):
        placed_pb = out.temp("placed_graph.pb")
        if placed.replicas is None:
            from pardnn.tf.placed_graph import write_placed_graph
            write_placed_graph(info["profile_dir"], graph, placement, placed_pb)
        else:
            from pardnn.tf.replicate import write_replicated_graph
            write_replicated_graph(info["profile_dir"], graph, placement, placed.cluster, placed.replicas,
                                   info.get("profile", {}), placed_pb)
        if "profile" in info:       # lets `pardnn run OUT_DIR` rebuild the model's feeds
            write_json(info["profile"], out.temp("profile.json"))
    _write_views(placed, placed_pb, out)
    report["stage_seconds"]["write"] = time.perf_counter() - t1
    write_json(report, out.temp("report.json"))


def _write_views(placed, placed_graph, out):
    """trace.json, the emulated step the report judged (placement.schedule and .profile),
    and tensorboard/ with `placed_graph` (a placed_graph.pb) or, without one, a GraphDef
    made from the cost graph."""
    graph, placement = placed.graph, placed.placement
    cluster, device = placement.cluster, placement.device
    write_trace(out.temp("trace.json"), emulated_step(graph, cluster, device, placement.schedule,
                                                      placement.profile),
                {"pardnn": "emulated step", "algorithm": placed.algorithm, "devices": placed.devices})
    if placed_graph is None:
        graph_def = graph_def_bytes(graph, cluster.names, device)
    else:
        with open(placed_graph, "rb") as f:
            graph_def = f.read()
    write_graph_logdir(out.temp("tensorboard"), graph_def)

"""The `pardnn place` flow as functions: place a PROFILE (`place_profile`) and write the
output folder (`write_place_dir`): placement.csv, report.json, trace.json (the emulated
step, pardnn.io.trace_events), tensorboard/ (the placed graph,
pardnn.io.tensorboard_graph), inputs.json (what `pardnn explain` needs to emulate the
step again) and, when PROFILE is a profile directory, placed_graph.pb and
profile.json. The `place` command and pardnn.keras.plan (in-process) run the same
code, so `pardnn emulate`, `explain`, `run` and the views read either's folder alike.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, replace

from pardnn.emulator.trace import emulated_step
from pardnn.graph.averaging import check_averaged
from pardnn.graph.order import step_mask
from pardnn.hardware.hosts import replica_cluster
from pardnn.graph.recompute import recompute_rows
from pardnn.io.placement import write_recompute_csv
from pardnn.io.tensorboard_graph import graph_def_bytes, write_graph_logdir
from pardnn.io.trace_events import write_trace
from pardnn.base.jsonfile import write_json
from pardnn.pipeline import place as placer
from pardnn.pipeline.load import load_cost_graph
from pardnn.pipeline.replicas import fastest_replicated
from pardnn.pipeline.report import placement_report, samples_per_step
from pardnn.base.progress import stage

# Loader statistics copied into report.json under "loader".
LOADER_FIELDS = ("steps", "untimed_nodes", "outside_step_nodes",
                 "unknown_stats_records", "dropped_back_edges", "pinned_cpu", "pinned_gpu", "fusions",
                 "fused_timed_nodes")


@dataclass
class PlacedProfile:
    """A placed PROFILE: what `write_place_dir` writes."""

    graph: object               # the CostGraph
    info: dict                  # the loader's statistics (pipeline.load.load_cost_graph)
    placed: object              # pardnn.pipeline.place.Placed
    cluster: object             # the cluster asked for (every host's, with replicas)
    algorithm: str
    devices: str                # the --devices text, for the trace's metadata
    replicas: int | None
    load_s: float
    loader: dict                # LOADER_FIELDS of info

    @property
    def placement(self):
        return self.placed.placement


def place_profile(profile, cluster, algorithm="pardnn", budget_s=None, replicas=None,
                  devices="", check=None, schedule="auto", recompute="auto", fetch="auto",
                  order="auto") -> PlacedProfile:
    """Load `profile` (a profile dir or cost graph JSON) and place it on `cluster` with
    `algorithm` (pipeline.place.run_placement; `budget_s` caps the portfolio); with
    `replicas`, on the first host's devices, replicated on R hosts (docs/multihost.md).
    `check(graph, cluster placed on)`, when given, runs before placing (it may refuse).
    `schedule`: the order a step of micro-batches carries (pipeline.schedule), in
    every replica with `replicas`. `recompute`:
    "auto" recomputes activations when nothing fits otherwise, "off" never; `order`,
    the order lever (the big gradient sums one after another), and `fetch`, the
    host-fetch lever on a cluster with a host tier, likewise (the
    placed graph, with its copies, is then PlacedProfile.graph)."""
    one_replica = cluster if replicas is None else replica_cluster(cluster, replicas)
    t0 = time.perf_counter()
    with stage(f"loading {profile}"):
        graph, info = load_cost_graph(profile)
    load_s = time.perf_counter() - t0
    if replicas is not None:
        check_averaged(graph, profile)
    if check is not None:
        check(graph, one_replica)
    with stage(f"placing {graph.num_nodes} nodes with {algorithm} on {cluster.num_devices} devices"):
        placed = placer.run_placement(graph, one_replica, algorithm, budget_s,
                                      schedule=schedule,
                                      among=_step(graph, info), recompute=recompute if replicas is None else "off",
                                      fetch=fetch if replicas is None else "off", order=order)
        if replicas is not None and schedule == "auto":     # the order that the replicated step runs fastest
            placed = replace(placed, placement=fastest_replicated(placed.graph, placed.placement, placed.scheduled,
                                                                  cluster, replicas))
    loader = {key: info[key] for key in LOADER_FIELDS if key in info}
    return PlacedProfile(placed.graph, info, placed, cluster, algorithm, str(devices), replicas, load_s, loader)


def _step(graph, info):
    """The ops a step runs (pardnn.graph.order.step_mask) by profile.json's fetches and
    initialiser; None (all) for a cost graph JSON or a tf.function's profile."""
    doc = info.get("profile") or {}
    if not doc.get("fetches"):
        return None
    return step_mask(graph, doc["fetches"], [doc["init"]] if doc.get("init") else [])


def place_inputs(profile, devices, memory=None, reserve=None, bandwidth=None, latency=None,
                 algorithm="pardnn", time_budget=None, replicas=None, host_memory=None) -> dict:
    """inputs.json: the profile (absolute path) and the flags, as `pardnn place` reads
    them, that `pardnn explain` needs to build the same cluster and emulate the same
    step again (a cluster file by its absolute path)."""
    devices = os.path.abspath(devices) if os.path.isfile(str(devices)) else str(devices)
    return {"format": "pardnn-place-inputs", "version": 1, "profile": os.path.abspath(profile),
            "devices": devices, "memory": memory, "reserve": reserve,
            "bandwidth": bandwidth, "latency": latency, "algorithm": algorithm,
            "time_budget": time_budget, "replicas": replicas, "host_memory": host_memory}


def write_place_dir(out, placed: PlacedProfile, inputs: dict):
    """The place outputs into `out`, an entered pardnn.io.outputs.OutputDir:
    placement.csv, placed_graph.pb and profile.json (profile dirs only), trace.json,
    tensorboard/, inputs.json (`inputs`), then report.json; returns the Report."""
    t1 = time.perf_counter()
    write_placed_files(out, placed.graph, placed.info, placed.placement, placed.cluster, placed.algorithm,
                       placed.devices, placed.replicas)
    write_json(inputs, out.temp("inputs.json"))
    report = placement_report(placed.graph, placed.placed, placed.loader,
                              None if placed.replicas is None else (placed.cluster, placed.replicas),
                              {"load": placed.load_s, "write": time.perf_counter() - t1},
                              samples_per_step(placed.info.get("profile")))
    write_json(report.to_json(), out.temp("report.json"))
    return report


def write_placed_files(out, graph, info, placement, cluster, algorithm, devices, replicas=None, prefix="",
                       views=True):
    """A placed dir's files under `prefix` in the OutputDir `out`: placement.csv,
    order.csv and recompute.csv (when the placement carries an order or copies),
    placed_graph.pb and profile.json (profile dirs only: what `pardnn run` reads), and
    with `views` trace.json and tensorboard/ (`pardnn capacity` writes one per count)."""
    placement.write_csv(graph, out.temp(prefix + "placement.csv"))
    if placement.order is not None and len(placement.order):
        placement.write_order_csv(graph, out.temp(prefix + "order.csv"))
    rows = recompute_rows(graph)
    if rows:
        write_recompute_csv(rows, out.temp(prefix + "recompute.csv"))
    placed_pb = None
    if info.get("profile_dir"):
        placed_pb = out.temp(prefix + "placed_graph.pb")
        if replicas is None:
            from pardnn.tf.placed_graph import write_placed_graph
            write_placed_graph(info["profile_dir"], graph, placement, placed_pb, placement.order)
        else:
            from pardnn.tf.replicate import write_replicated_graph
            write_replicated_graph(info["profile_dir"], graph, placement, cluster, replicas,
                                   info.get("profile", {}), placed_pb, placement.order)
        if "profile" in info:       # lets `pardnn run OUT_DIR` rebuild the model's feeds
            write_json(info["profile"], out.temp(prefix + "profile.json"))
    if views:
        _write_views(graph, placement, algorithm, devices, placed_pb, out, prefix)


def _write_views(graph, placement, algorithm, devices, placed_graph, out, prefix=""):
    """trace.json, the emulated step the report judged (placement.schedule and .profile),
    and tensorboard/ with `placed_graph` (a placed_graph.pb) or, without one, a GraphDef
    made from the cost graph."""
    cluster, device = placement.cluster, placement.device
    write_trace(out.temp(prefix + "trace.json"), emulated_step(graph, cluster, device, placement.schedule,
                                                               placement.profile),
                {"pardnn": "emulated step", "algorithm": algorithm, "devices": str(devices)})
    if placed_graph is None:
        graph_def = graph_def_bytes(graph, cluster.names, device)
    else:
        with open(placed_graph, "rb") as f:
            graph_def = f.read()
    write_graph_logdir(out.temp(prefix + "tensorboard"), graph_def)

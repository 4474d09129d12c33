"""A `pardnn place` output folder, opened again for an explanation: the graph it was
placed from, the placement, and the same emulated step report.json describes.

The folder records what it was placed from in inputs.json (the profile's path, the
flags that made the cluster; pardnn.commands.place). Opening it loads that profile,
reads placement.csv and emulates the step again; the emulation is deterministic, so it
must give report.json's step time, busy times and memory peaks to the bit, and when it
does not (the profile was profiled again since, the cluster file edited) the folder
is refused rather than explained with numbers of another step.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from pardnn.emulator.memory import track_memory
from pardnn.emulator.scheduler import simulate
from pardnn.graph.order import read_order_rows, with_order
from pardnn.pipeline.recompute import placed_graph
from pardnn.pipeline.schedule import SCHEDULES, ranks
from pardnn.base.errors import UserError
from pardnn.hardware import cluster_from_flags
from pardnn.hardware.hosts import replica_cluster
from pardnn.io.outputs import MANIFEST
from pardnn.io.placement import read_csv, read_order_csv
from pardnn.base.jsonfile import read_json
from pardnn.pipeline.load import load_cost_graph

INPUTS = "inputs.json"
INPUTS_FORMAT = "pardnn-place-inputs"
CAPACITY, CAPACITY_FORMAT = "capacity.json", "pardnn-capacity"
CLUSTER_FLAGS = ("devices", "memory", "reserve", "bandwidth", "latency", "host_memory")


@dataclass(frozen=True, eq=False)
class Emulated:
    """A place output emulated again: the placement with the emulation report.json was
    made from (not pardnn.pipeline.place.Placed, what the pipeline returns)."""

    graph: object               # pardnn.graph.CostGraph
    cluster: object             # pardnn.hardware.cluster.Cluster (one replica's, with --replicas)
    device: np.ndarray          # int per node
    schedule: object            # pardnn.emulator.scheduler.Schedule
    memory: object              # pardnn.emulator.memory.MemoryProfile
    report: dict                # report.json
    inputs: dict                # inputs.json
    profile_json: dict | None   # the profile's profile.json, if it has one
    capacity: dict | None = None    # the `pardnn capacity` run it is a kN/ of (capacity_of)


def read_inputs(folder) -> dict:
    """inputs.json of place output `folder`; UserError (one line naming the folder)
    unless `folder` is one, written by a pardnn that records its inputs."""
    if not os.path.isdir(folder):
        raise UserError(f"PLACED_DIR: {folder} is not a directory (give a `pardnn place` output folder)")
    for name in (MANIFEST, "placement.csv", "report.json"):
        if not os.path.isfile(os.path.join(folder, name)):
            raise UserError(f"PLACED_DIR: {folder} is not a `pardnn place` output folder (it has no {name})")
    path = os.path.join(folder, INPUTS)
    if not os.path.isfile(path):
        raise UserError(f"PLACED_DIR: {folder} has no {INPUTS} (placed by an older pardnn); place it again")
    inputs = read_json(path, prefix="PLACED_DIR: ")
    if not isinstance(inputs, dict) or inputs.get("format") != INPUTS_FORMAT or not isinstance(
            inputs.get("profile"), str) or not isinstance(inputs.get("devices"), str):
        raise UserError(f"PLACED_DIR: {path} is not a pardnn inputs file")
    return inputs


def open_placed(folder, inputs, cluster, profile=None) -> Emulated:
    """Place output `folder` with its `inputs` (read_inputs) and `cluster` (built from
    them), emulated again from `profile` (default: the one inputs.json names) and
    checked against its report.json (module docstring)."""
    if profile and not os.path.exists(profile):
        raise UserError(f"--profile: {profile} does not exist")
    profile = profile or inputs["profile"]
    if not os.path.exists(profile):
        raise UserError(f"PLACED_DIR: {folder} was placed from {profile}, which is gone; "
                        f"give where it is now with --profile")
    report = read_json(os.path.join(folder, "report.json"), prefix="PLACED_DIR: ")
    if not isinstance(report, dict) or "makespan_us" not in report or "devices" not in report:
        raise UserError(f"PLACED_DIR: {folder}/report.json is not a pardnn report")
    if list(report["devices"]) != cluster.names:
        raise UserError(f"PLACED_DIR: {folder}/report.json was placed on other devices than "
                        f"{inputs['devices']!r} gives now ({report['devices'][0]}, ...)")
    graph, info = load_cost_graph(profile)
    graph = placed_graph(graph, os.path.join(folder, "placement.csv"))
    if graph.num_nodes != report.get("num_nodes") or graph.num_edges != report.get("num_edges"):
        raise UserError(f"PLACED_DIR: {profile} has {graph.num_nodes} nodes and {graph.num_edges} edges, "
                        f"{folder}/report.json {report.get('num_nodes')} and {report.get('num_edges')}: "
                        f"not the graph it placed")
    if report.get("memory_order"):      # the order lever's edges: the step the report emulated
        rows = read_order_csv(os.path.join(folder, "order.csv"))
        graph = with_order(graph, read_order_rows(graph, rows, f"PLACED_DIR: {folder}/order.csv"))[0]
    device = read_csv(os.path.join(folder, "placement.csv"), graph, cluster)
    schedule = simulate(graph, cluster, device, ranks(graph, _schedule_of(folder, report)))
    memory = track_memory(graph, cluster, device, schedule)
    _check_same_step(folder, profile, report, schedule, memory)
    profile_json = info.get("profile")
    if profile_json is None and os.path.isfile(os.path.join(folder, "profile.json")):
        profile_json = read_json(os.path.join(folder, "profile.json"), prefix="PLACED_DIR: ")
    return Emulated(graph, cluster, np.asarray(device, np.int64), schedule, memory, report, inputs,
                  profile_json if isinstance(profile_json, dict) else None, capacity_of(folder))


def _schedule_of(folder, report) -> str:
    """The order the placement carries (report.json's `schedule`; TF's FIFO without one)."""
    name = report.get("schedule", "fifo")
    if name != "fifo" and name not in SCHEDULES:
        raise UserError(f"PLACED_DIR: {folder}/report.json: unknown schedule {name!r}")
    return name


def capacity_of(folder) -> dict | None:
    """{"memory_bytes", "rows": {device count: row}} of the `pardnn capacity` run whose
    placed dir `folder` is (DIR/kN/, named by DIR/capacity.json: docs/capacity.md), when
    it was placed at that run's memory, so that the rows of one device more or fewer
    answer the same question; else None."""
    path = os.path.join(os.path.dirname(os.path.abspath(folder)), CAPACITY)
    if not os.path.isfile(path):
        return None
    doc = read_json(path, prefix="PLACED_DIR: ")
    if not isinstance(doc, dict) or doc.get("format") != CAPACITY_FORMAT or not isinstance(doc.get("rows"), list):
        return None
    rows = {row["devices"]: row for row in doc["rows"] if isinstance(row, dict) and isinstance(row.get("devices"), int)}
    name = os.path.basename(os.path.abspath(folder))
    mine = [row.get("placement") or {} for row in rows.values() if (row.get("placement") or {}).get("dir") == name]
    if not mine or mine[0].get("memory_bytes") != doc.get("memory_bytes"):
        return None
    return {"memory_bytes": doc["memory_bytes"], "rows": rows}


def _check_same_step(folder, profile, report, schedule, memory) -> None:
    """UserError unless the emulation gives report.json's step, busy times and peaks."""
    same = (schedule.makespan == report["makespan_us"]
            and [float(x) for x in schedule.busy_us] == report.get("busy_us")
            and [int(x) for x in memory.peak_bytes] == report.get("peak_memory_bytes"))
    if not same:
        raise UserError(f"PLACED_DIR: emulating {folder}'s placement of {profile} gives a step of "
                        f"{schedule.makespan:.6g} us, report.json says {report['makespan_us']:.6g} us "
                        f"(or other busy times or peaks): the profile or the cluster changed since it was placed")


def placed_cluster(folder, inputs):
    """The cluster the flags in `folder`'s inputs.json give, one replica's with
    --replicas; UserError naming inputs.json when they do not make one."""
    where = os.path.join(folder, INPUTS)
    try:
        cluster = cluster_from_flags(*(inputs.get(key) for key in CLUSTER_FLAGS))
        return cluster if inputs.get("replicas") is None else replica_cluster(cluster, int(inputs["replicas"]))
    except UserError as exc:
        raise UserError(f"PLACED_DIR: {where}: {exc}") from None
    except (TypeError, ValueError) as exc:
        raise UserError(f"PLACED_DIR: {where}: malformed ({exc})") from None

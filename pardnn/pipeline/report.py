"""report.json: what a placement costs, in microseconds and bytes, as one typed Report
assembled here and nowhere else (docs/report.md is made from the fields' docs:
`python -m tools.report_doc`, checked by tests/test_report.py).

`placement_report` assembles what `pardnn place` writes, `emulation_report` what
`pardnn emulate --report` writes (the same emulation fields, agreeing exactly for the
same placement). A field is filled only by code that computes it; a field nothing
computed is None in the Report and absent from report.json, never faked.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, fields

import numpy as np

from pardnn.emulator.memory import track_memory
from pardnn.emulator.scheduler import simulate
from pardnn.graph.edge_costs import comm_bytes
from pardnn.pipeline import replicas as replicated
from pardnn.pipeline.bounds import step_lower_bound
from pardnn.pipeline.schedule import idle_share
from pardnn.repair.least_memory import least_memory_on

# Sections of the report, in the order docs/report.md lists them.
SECTIONS = {
    "placement": "what was placed where",
    "emulation": "the emulated step of the placement (pardnn/emulator/)",
    "micro-batches": "a step split into micro-batches only (`pardnn profile --micro-batches`, `pardnn.keras.plan("
                     "micro_batches=)`): its order (pardnn/pipeline/schedule.py)",
    "levers": "only when nothing fit without them: the memory levers the placement uses "
              "(pardnn/pipeline/recompute.py, docs/algorithm.md \"Recomputation\")",
    "repair": "what the memory repair did (pardnn/pipeline/judge.py, docs/repair.md)",
    "portfolio": "`--algorithm pardnn` only: its candidates (pardnn/pipeline/choice.py, docs/algorithm.md)",
    "run": "the command's run: wall times (only these depend on the machine), loader, replicas",
}


def _field(section: str, doc: str):
    return field(default=None, metadata={"section": section, "doc": doc})


@dataclass
class Report:
    """report.json. Times in microseconds, sizes in bytes; lists have one entry per
    device in the order of `devices`."""

    algorithm: str | None = _field("placement", "the `--algorithm` placed with (`placement.csv` for `pardnn emulate`)")
    placement: str | None = _field("placement", "`pardnn emulate`: the placement.csv emulated (absolute path)")
    num_nodes: int | None = _field("placement", "nodes of the cost graph")
    num_edges: int | None = _field("placement", "edges of the cost graph")
    devices: list | None = _field("placement", "full TensorFlow device names")
    memory_capacity_bytes: list | None = _field("placement", "each device's memory (before the reserve)")
    reserve: float | None = _field("placement", "share of each device's memory kept free")
    nodes_per_device: list | None = _field("placement", "nodes placed on each device")
    comm_bytes: int | None = _field("placement", "bytes crossing devices per step")
    makespan_us: float | None = _field("emulation", "the emulated step time")
    single_device_us: float | None = _field("emulation", "the step with everything on one device: the total work")
    lower_bound_us: float | None = _field(
        "emulation", "no placement's emulated step is shorter: the largest of the critical path, work / K, "
        "a path with its forced transfers, the interval bound (small graphs) and the exact model's proven "
        "bound (small graphs; docs/bounds.md)")
    least_memory: dict | None = _field(
        "emulation", "no placement fits in less usable memory per device (memory minus the reserve) on these "
        "K devices if they shared one memory, or, beside a host tier at its own usable memory (`host_bytes`), "
        "on each of the other devices: `bytes`, the bound that gives it (`binding`) and what binds it "
        "(`what`), and `bounds`, each bound per device (docs/bounds.md, \"Least memory\")")
    samples_per_step: int | None = _field(
        "emulation", "the samples one step trains, when the profile says: a built-in family's `batch` knob, "
        "a Keras plan's batch (profile.json's `batch`)")
    time_per_sample_us: float | None = _field(
        "emulation", "`makespan_us` over `samples_per_step`: what steps of other batches, micro-batch counts "
        "or device counts compare by")
    busy_us: list | None = _field("emulation", "compute time per device")
    peak_memory_bytes: list | None = _field("emulation", "emulated memory peak per device")
    peak_time_us: list | None = _field("emulation", "when each device first reaches its peak")
    feasible: bool | None = _field("emulation", "every device's peak fits its capacity (memory minus the reserve)")
    micro_batches: int | None = _field("micro-batches", "how many micro-batches the step holds")
    schedule: str | None = _field(
        "micro-batches", "the order the placement carries (`fifo`: TF's own), its control edges in order.csv "
        "and placed_graph.pb; `makespan_us` is this order's step")
    schedules: dict | None = _field("micro-batches", "each order's emulated step on this placement, by name")
    bubble: float | None = _field(
        "micro-batches", "the share of the devices' time within the step that none of them computes")
    memory_order: dict | None = _field(
        "levers", "an order that lowers the peak (pardnn/pipeline/order_lever.py): its `name` and its "
        "`control_edges`, carried as order.csv and as control inputs of placed_graph.pb")
    host_fetch: dict | None = _field(
        "levers", "on a cluster with a host tier: the weights read again for the backward pass (`reads`, "
        "`pardnn_recompute/` reads in placed_graph.pb; `bytes` in all) and the reads' order (`control_edges`, "
        "in order.csv), pardnn/pipeline/host_fetch.py; `fetches`, per weight in the order of its first fetch: "
        "its read's name, `bytes`, and when its forward and its backward copy reach their readers "
        "(`forward_us`, `backward_us`); the placement without it ran compute-bound ops on the host")
    recompute: dict | None = _field(
        "levers", "activations recomputed in the backward pass instead of kept: `ops` recomputed (their copies "
        "are `pardnn_recompute/` nodes of placed_graph.pb), `segments` the forward pass was cut into, "
        "`arithmetic` (false: compute-bound ops kept, selective recomputation), "
        "`kept_before_bytes` and `kept_bytes` (the activations kept from the forward to the backward pass "
        "without and with it), `added_us` (the copies' compute), `least_memory_keeping` (the least memory "
        "of the graph as profiled, every activation kept) and `least_memory_recomputing` (the bounds that "
        "hold whatever is recomputed); `least_memory` above is that of the graph as placed, copies included")
    moved_nodes: int | None = _field("repair", "nodes the memory repair moved")
    peak_memory_before_repair_bytes: list | None = _field("repair", "emulated peak per device before the repair")
    repaired_devices: list | None = _field("repair", "devices whose peak passed their capacity before the repair")
    repair_rounds: int | None = _field("repair", "repair rounds (emulations after the first)")
    changed_nodes: int | None = _field("repair", "nodes whose device differs from the winning placer's own output")
    candidate: str | None = _field("portfolio", "the candidate kept")
    step1_output: str | None = _field("portfolio", "what Step 1 returned: `thesis`, `affinity` or `one-device`")
    candidates: dict | None = _field(
        "portfolio", "per candidate, in registry order: `feasible`, `makespan_us`, `moved_nodes`, `seconds`, "
        "`refined_makespan_us` for a refined finalist, `reason` when it cannot fit, `skipped` when a "
        "`--time-budget` cut it")
    refine_memory: dict | None = _field(
        "portfolio", "refinement within memory of the kept candidate: `makespan_after_repair_us`, "
        "`moved_nodes`, `batches`, `stopped_by_budget`, `batches_far_behind`")
    placement_seconds: float | None = _field("run", "wall time of the placement: placers, repairs, refinement")
    stage_seconds: dict | None = _field(
        "run", "wall time per stage: load, the placers' own stages, repair, refine_memory, evaluate (this "
        "report's emulation fields), write")
    loader: dict | None = _field("run", "profile dirs: the loader's statistics (docs/profiles.md, \"Loading one\")")
    replicas: dict | None = _field("run", "`--replicas R`: the emulated step of R data-parallel replicas "
                                   "(with the profile's batch: their samples per step and time per sample) "
                                   "(docs/multihost.md)")

    def to_json(self) -> dict:
        """The fields that were computed, by name, in this order."""
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None}


def emulation_report(graph, cluster, device, schedule, profile, algorithm, bound=None, samples=None,
                     **more) -> Report:
    """The report of placement `device` from its emulation (`schedule`, `profile`):
    what was placed where, and the emulation fields. `bound`: the StepLowerBound whose
    `us` is lower_bound_us, when known (else pipeline.bounds.step_lower_bound in full,
    solving the exact model on small graphs). `samples`: the samples a step trains,
    when known (`samples_per_step`). `more`: other fields, by name."""
    device = np.asarray(device)
    per_sample = {"samples_per_step": int(samples), "time_per_sample_us": schedule.makespan / int(samples)} \
        if samples else {}
    return Report(
        algorithm=algorithm, num_nodes=graph.num_nodes, num_edges=graph.num_edges, devices=cluster.names,
        memory_capacity_bytes=[int(x) for x in cluster.memory], reserve=cluster.reserve,
        nodes_per_device=[int(x) for x in np.bincount(device, minlength=cluster.num_devices)],
        comm_bytes=comm_bytes(graph, device),
        makespan_us=schedule.makespan, **per_sample, single_device_us=graph.total_work_us(),
        lower_bound_us=(step_lower_bound(graph, cluster) if bound is None else bound).us,
        least_memory=least_memory_on(graph, cluster).fields(),
        busy_us=[float(x) for x in schedule.busy_us],
        peak_memory_bytes=[int(x) for x in profile.peak_bytes],
        peak_time_us=[float(x) for x in profile.peak_time_us],
        feasible=bool(np.all(profile.peak_bytes <= cluster.capacity)), **more)


def evaluate(graph, cluster, device) -> Report:
    """The emulation report of placement `device` (int per node) on `cluster`, with the
    lower bound without the exact model's part (pipeline.bounds.step_lower_bound with
    exact_model=False: no CP-SAT solve)."""
    device = np.asarray(device)
    schedule = simulate(graph, cluster, device)
    profile = track_memory(graph, cluster, device, schedule)
    return emulation_report(graph, cluster, device, schedule, profile, "",
                            step_lower_bound(graph, cluster, exact_model=False))


def placement_report(graph, placed, loader=None, replicas=None, stage_seconds=None, samples=None) -> Report:
    """What `pardnn place` writes for `placed` (pardnn.pipeline.place.Placed).
    `replicas`: (the cluster of every host, R) for `--replicas R`; `stage_seconds`: the
    command's own stages (load first, write last) around the placement's; `samples`:
    the samples a step trains, when known (`samples_per_step`)."""
    t0 = time.perf_counter()
    placement, chosen = placed.placement, placed.chosen
    cluster, judged = placement.cluster, chosen.judged
    graph_bound = step_lower_bound(graph, cluster, emulated=chosen.step_bound)
    more = {**_repair_fields(judged, cluster), **_portfolio_fields(chosen)}
    report = emulation_report(graph, cluster, placement.device, placement.schedule, placement.profile,
                              placement.algorithm, graph_bound,
                              changed_nodes=int(np.count_nonzero(judged.device != chosen.raw)),
                              placement_seconds=placed.seconds, loader=loader or None, samples=samples, **more)
    for key, value in _schedule_fields(placed, cluster).items():
        setattr(report, key, value)
    report.recompute = _recompute_fields(placed.recomputation, cluster)
    if placed.host_fetch is not None:
        report.host_fetch = _fetch_fields(placed)
    if not placed.scheduled and placement.order is not None and len(placement.order):
        report.memory_order = {"name": placement.schedule_name, "control_edges": len(placement.order)}
    own = dict(stage_seconds or {})
    report.stage_seconds = {**({"load": own.pop("load")} if "load" in own else {}), **placement.stage_seconds,
                            "evaluate": time.perf_counter() - t0, **own}
    if replicas is not None:
        full, count = replicas
        report.replicas = replicated.estimate(graph, placement.device, full, count, report.makespan_us,
                                              placement.order)
        if samples:         # the profile's batch is one replica's
            step = report.replicas["step_time_us"]
            report.replicas.update(samples_per_step=count * int(samples), time_per_sample_us=step / (count * samples))
    return report


def _fetch_fields(placed) -> dict:
    """report.json's `host_fetch` for a placement with the host-fetch lever: the reads,
    the order's edges, the bytes read again and, per weight in the order of its first
    fetch, when each of its two copies reaches its readers (`_arrival`)."""
    fetch, graph, schedule = placed.host_fetch, placed.graph, placed.placement.schedule
    data = graph.edge_slot >= 0
    size = np.zeros(graph.num_nodes, np.int64)
    np.maximum.at(size, graph.edge_src[data], graph.edge_bytes[data])
    rows = [{"weight": graph.names[o], "bytes": int(size[o]), "forward_us": _arrival(graph, schedule, o),
             "backward_us": _arrival(graph, schedule, c)}
            for o, c in zip(fetch.refetch.originals.tolist(), fetch.refetch.copies.tolist())]
    rows.sort(key=lambda row: (row["forward_us"], row["weight"]))
    return {"reads": len(rows), "control_edges": len(fetch.order), "bytes": sum(r["bytes"] for r in rows),
            "fetches": rows}


def _arrival(graph, schedule, read) -> float:
    """When the tensor of `read` first reaches a reader on another device (the host's
    weight crossing to the GPU), else when the read finishes (its readers beside it)."""
    eids = np.arange(graph.succ_ptr[read], graph.succ_ptr[read + 1])
    transfers = schedule.edge_transfer[eids]
    transfers = transfers[transfers >= 0]
    return float(schedule.transfer_arrival[transfers].min()) if len(transfers) else float(schedule.finish[read])


def samples_per_step(profile_doc) -> int | None:
    """The samples one step of a profile trains (profile.json's `batch`, else a built-in
    family's `batch` knob), None when it does not say."""
    doc = profile_doc or {}
    batch = doc.get("batch", (doc.get("knobs") or {}).get("batch"))
    return int(batch) if isinstance(batch, int) and not isinstance(batch, bool) and batch > 0 else None


def _schedule_fields(placed, cluster) -> dict:
    """The micro-batch fields (none for a step that is not split)."""
    if not placed.scheduled:
        return {}
    placement = placed.placement
    return {"micro_batches": placed.micro_batches, "schedule": placement.schedule_name,
            "schedules": {s.name: s.makespan_us for s in placed.scheduled},
            "bubble": idle_share(placement.schedule, cluster)}


def _recompute_fields(lever, cluster) -> dict | None:
    """The recompute field of a placement that recomputes (None otherwise)."""
    if lever is None:
        return None
    plan, before = lever.plan, least_memory_on(lever.source, cluster)
    return {"ops": len(plan.ops), "segments": plan.segments, "arithmetic": plan.arithmetic,
            "kept_before_bytes": plan.saved_bytes,
            "kept_bytes": plan.kept_bytes, "added_us": plan.recompute_us,
            "least_memory_keeping": before.bytes, "least_memory_recomputing": before.recomputing().bytes}


def _repair_fields(judged, cluster) -> dict:
    over = judged.peak_before > cluster.capacity
    return {"moved_nodes": int(judged.moved.sum()),
            "peak_memory_before_repair_bytes": [int(x) for x in judged.peak_before],
            "repaired_devices": [cluster.names[d] for d in np.flatnonzero(over)],
            "repair_rounds": judged.rounds}


def _portfolio_fields(chosen) -> dict:
    """The portfolio's fields; none for a portfolio of one."""
    if len(chosen.candidates) < 2:
        return {}
    fields_ = {"candidate": chosen.winner, "step1_output": chosen.step1_output, "candidates": chosen.candidates}
    refined = chosen.refinement
    if refined is not None:
        fields_["refine_memory"] = {"makespan_after_repair_us": refined.makespan_before_us,
                                    "moved_nodes": refined.refined_nodes, "batches": refined.batches,
                                    "stopped_by_budget": refined.stopped_by_budget,
                                    "batches_far_behind": refined.far_behind}
    return fields_


def doc_table() -> str:
    """docs/report.md's table of fields, made from the fields' docs."""
    rows = ["| field | meaning |", "|---|---|"]
    for section, about in SECTIONS.items():
        rows.append(f"| **{section}** | {about} |")
        rows += [f"| `{f.name}` | {f.metadata['doc']} |" for f in fields(Report) if f.metadata["section"] == section]
    return "\n".join(rows) + "\n"

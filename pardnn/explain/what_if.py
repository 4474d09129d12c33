"""What would help: each change emulated, never guessed.

- 2x link bandwidth: the same placement emulated on the cluster with every link twice
  as wide (latencies kept).
- The layer whose move alone shortens the step most: for the layers with most time on
  the critical path, each moved (its nodes whose colocation groups hold no other
  layer's nodes; the others stay with those) to the other devices its pins allow
  (when MOVE_TRIALS do not reach them all, those its edges reach most), emulated; the
  fastest move that still fits memory wins.
  A trial that a lower bound shows cannot win is not emulated (pardnn.emulator.trial).
- One device more or fewer: the graph placed again by the same algorithm on the
  cluster with its last device dropped, or a copy of it added (same memory and links),
  repaired and emulated as `pardnn place` does. That is a whole placement, so it runs
  on graphs of at most PLACE_AGAIN_MAX_NODES nodes unless asked for.
- The best other candidate: report.json's candidates (each emulated by `pardnn place`);
  on graphs of at most PLACE_AGAIN_MAX_NODES nodes its placement is built again and
  emulated here.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from pardnn.emulator.memory import track_memory
from pardnn.emulator.scheduler import simulate
from pardnn.emulator.trial import emulate
from pardnn.base.errors import UserError
from pardnn.base.units import format_size
from pardnn.graph.constraints import allowed_devices
from pardnn.io.trace_events import short_names
from pardnn.pipeline.judge import judge
from pardnn.pipeline.place import place
from pardnn.pipeline.portfolio import build

PLACE_AGAIN_MAX_NODES = 2_000   # larger graphs: placing again costs about a `pardnn place`
MOVE_TRIALS = 32                # layer moves emulated at most (layers x devices)
MOVE_LAYERS = 8                 # layers tried at most


def wider_links(placed) -> dict:
    """The step with every link's bandwidth doubled, same placement."""
    cluster = replace(placed.cluster, bandwidth=placed.cluster.bandwidth * 2.0)
    schedule = simulate(placed.graph, cluster, placed.device)
    memory = track_memory(placed.graph, cluster, placed.device, schedule)
    return _row("2x link bandwidth", placed, schedule.makespan, bool(np.all(memory.peak_bytes <= cluster.capacity)),
                "the same placement emulated with every link twice as wide")


def best_layer_move(placed, layers, path_rows) -> dict:
    """The layer whose move alone to one other device shortens the step most (module
    docstring); None in `makespan_us` when no tried move shortens it and fits."""
    graph, cluster, device = placed.graph, placed.cluster, placed.device
    tried_layers = _layers_to_move(layers, path_rows, cluster.num_devices)
    per_layer = max(1, MOVE_TRIALS // max(len(tried_layers), 1))
    allowed = allowed_devices(graph, cluster)
    best, found, trials = placed.schedule.makespan, None, 0
    for layer in tried_layers:
        groups = _own_groups(graph, layers, layer)
        members = np.isin(graph.group, groups)
        if not members.any():
            continue
        for d in _destinations(graph, device, members, allowed[groups].all(axis=0))[:per_layer]:
            trial = device.copy()
            trial[members] = d
            trials += 1
            schedule = emulate(graph, cluster, trial, beat=best)
            if schedule is None or schedule.makespan >= best:
                continue
            memory = track_memory(graph, cluster, trial, schedule)
            if np.all(memory.peak_bytes <= cluster.capacity):
                best, found = schedule.makespan, (layer, d, int(members.sum()),
                                                  int(np.count_nonzero(layers.of == layer) - members.sum()))
    where = ("every other device" if per_layer >= cluster.num_devices - 1
             else f"the {per_layer} devices its edges reach most")
    tried = (f"{trials} moves tried: the {len(tried_layers)} layers longest on the critical path, "
             f"each to {where}")
    if found is None:
        row = _row("move one layer", placed, None, None, f"{tried}; none shortens the step and fits")
        row["trials"] = trials
        return row
    layer, d, nodes, stay = found
    row = _row(f"move {layers.names[layer]} to {short_names(cluster.names)[d]}", placed, best, True,
               f"the best of {tried}; it moves {nodes} nodes" + (
                   f" ({stay} stay: colocated with other layers' nodes)" if stay else ""))
    row.update({"layer": layers.names[layer], "to_device": cluster.names[d], "trials": trials})
    return row


def _own_groups(graph, layers, layer) -> np.ndarray:
    """The colocation groups all of whose nodes are in `layer`: what moves when the
    layer does (a group it shares with other layers stays with them)."""
    groups = np.unique(graph.group[layers.of == layer])
    outside = np.unique(graph.group[layers.of != layer])
    return np.setdiff1d(groups, outside, assume_unique=True)


def _layers_to_move(layers, path_rows, k) -> list:
    """The layers longest on the critical path, at most MOVE_LAYERS and no more than
    MOVE_TRIALS allows one destination each (none on one device)."""
    index = {name: i for i, name in enumerate(layers.names)}
    return [index[row["layer"]] for row in path_rows][:min(MOVE_LAYERS, MOVE_TRIALS) if k > 1 else 0]


def _destinations(graph, device, members, allowed) -> list:
    """The devices `members` may all move to that they are not all on already, those
    their edges to outside nodes reach most first (ties by device index)."""
    outside = members[graph.edge_src] != members[graph.edge_dst]
    ends = np.where(members[graph.edge_src[outside]], graph.edge_dst[outside], graph.edge_src[outside])
    reach = np.bincount(device[ends], minlength=len(allowed))
    order = np.lexsort((np.arange(len(allowed)), -reach))
    return [int(d) for d in order if allowed[d] and not np.all(device[members] == d)]


def device_count(placed, delta, allowed_to_place, budget_s=None) -> dict:
    """The graph placed again on one device more (`delta` 1) or fewer (-1; not on one
    device)."""
    cluster, graph = placed.cluster, placed.graph
    k = cluster.num_devices + delta
    label = f"{k} devices ({'one more' if delta > 0 else 'one fewer'})"
    if placed.capacity is not None and k in placed.capacity["rows"]:
        return _from_capacity(label, placed, placed.capacity["rows"][k], placed.capacity["memory_bytes"])
    if cluster.num_devices < 2:
        return _row(label, placed, None, None, "a one-device cluster has no link to copy for a second device")
    if not allowed_to_place:
        return _row(label, placed, None, None,
                    f"not computed: placing {graph.num_nodes} nodes again costs about a `pardnn place`; "
                    f"pass --place-again (or run `pardnn place ... --devices` with {k} devices)")
    algorithm = placed.report.get("algorithm", "pardnn")
    try:
        placement, report = place(graph, resized(cluster, k), algorithm, budget_s)
    except UserError as exc:
        return _row(label, placed, None, False, f"{algorithm} placed again: {exc}")
    return _row(label, placed, report.makespan_us, report.feasible,
                f"{algorithm} placed again on {k} devices, repaired and emulated")


def _from_capacity(label, placed, row, memory) -> dict:
    """The what-if of one device count from the capacity.json row `pardnn capacity` wrote
    for it (the same graph placed, repaired and emulated on that many devices)."""
    how = (f"capacity.json: pardnn capacity placed the graph on {row['devices']} devices at "
           f"{format_size(memory)} per device")
    if row.get("fits_at_memory"):
        return _row(label, placed, row["step_us_at_memory"], True, how)
    return _row(label, placed, None, False, f"{how}: it does not fit there (it fits from "
                                            f"{format_size(row['least_memory_bytes'])} per device)")


def resized(cluster, k):
    """`cluster` with its devices after the k-th dropped, or (k = K + 1) a copy of its
    last device added: same kind, memory and host, the next index of its kind, and the
    last device's links to the others (its link to the one before it between the two)."""
    n = cluster.num_devices
    if k <= n:
        return replace(cluster, devices=cluster.devices[:k], latency_us=cluster.latency_us[:k, :k].copy(),
                       bandwidth=cluster.bandwidth[:k, :k].copy())
    last = cluster.devices[-1]
    prefix = last.name.rsplit(":", 1)[0]
    taken = [int(d.name.rsplit(":", 1)[1]) for d in cluster.devices if d.name.rsplit(":", 1)[0] == prefix]
    added = replace(last, name=f"{prefix}:{max(taken) + 1}")
    latency, bandwidth = _grown(cluster.latency_us, 0.0), _grown(cluster.bandwidth, np.inf)
    return replace(cluster, devices=cluster.devices + (added,), latency_us=latency, bandwidth=bandwidth)


def _grown(matrix, diagonal):
    """`matrix` with a last row and column copied from its last ones; the new pair
    gets the last device's link to the one before it."""
    n = matrix.shape[0]
    out = np.empty((n + 1, n + 1))
    out[:n, :n] = matrix
    out[n, :n], out[:n, n] = matrix[n - 1], matrix[:, n - 1]
    out[n, n - 1] = out[n - 1, n] = matrix[n - 1, n - 2]
    out[n, n] = diagonal
    return out


def other_candidate(placed, allowed_to_place) -> dict:
    """The best candidate of report.json other than the one kept: its step (refined
    within memory when it was), and on small graphs its placement built and emulated."""
    report = placed.report
    kept = report.get("candidate")
    steps = {name: entry.get("refined_makespan_us", entry.get("makespan_us"))
             for name, entry in report.get("candidates", {}).items()
             if name != kept and entry.get("feasible") and entry.get("makespan_us") is not None}
    if not steps:
        return _row("best other candidate", placed, None, None,
                    "report.json lists no other feasible candidate" if "candidates" in report
                    else f"--algorithm {report.get('algorithm')} builds no candidates")
    name = min(steps, key=lambda key: (steps[key], list(steps).index(key)))
    entry = report["candidates"][name]
    how = f"{name}: {'refined within memory, ' if 'refined_makespan_us' in entry else ''}emulated by pardnn place"
    row = _row(f"candidate {name}", placed, steps[name], True, how)
    if allowed_to_place:
        judged = judge(placed.graph, placed.cluster, build(placed.graph, placed.cluster, name))
        row["rebuilt_makespan_us"] = judged.schedule.makespan
        row["how"] += (f"; built again and emulated here: {judged.schedule.makespan:.6g} us after its "
                       f"memory repair" + (" (report.json: the same)" if judged.schedule.makespan
                                            == entry["makespan_us"] else
                                            f" (report.json: {entry['makespan_us']:.6g} us)"))
    return row


def _row(change, placed, makespan, feasible, how) -> dict:
    step = placed.schedule.makespan
    return {"change": change, "makespan_us": makespan, "feasible": feasible,
            "delta_us": None if makespan is None else makespan - step,
            "speedup": None if not makespan else step / makespan, "how": how}

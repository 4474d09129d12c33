"""Why a placement is as fast as it is and as full as it is, by the model's own layers
(`pardnn explain`, docs/explain.md).

An explanation is made from one emulated step, the one report.json describes
(placed.py opens a place output folder and checks that its emulation gives
report.json's numbers): what bound binds and the critical path by layer (step.py),
what fills each device at its peak (memory_at_peak.py), and what would help, each
change emulated (what_if.py). layers.py says which layer each node belongs to;
terminal.py and page.py show the explanation, which `explain` returns as a dict of
plain numbers and strings (the `--json` file).
"""

from __future__ import annotations

import numpy as np

from pardnn.explain import memory_at_peak, step, what_if
from pardnn.explain.layers import find_layers

FORMAT, VERSION = "pardnn-explanation", 1


def explain(placed, top=5, place_again=None, depth=None, budget_s=None) -> dict:
    """The explanation of `placed` (pardnn.explain.placed.Emulated): `top` rows per list,
    `place_again` whether the device-count what-ifs may place the graph again (None:
    on graphs of at most what_if.PLACE_AGAIN_MAX_NODES nodes), `depth` a fixed scope
    depth for the layers, `budget_s` the --time-budget those placements get."""
    graph = placed.graph
    layers = find_layers(graph, placed.profile_json, depth)
    segments, nodes, transfers = step.path_segments(placed)
    path_rows = step.path_by_layer(placed, layers, segments)
    loss = memory_at_peak.loss_node(graph, placed.profile_json)
    forward, backward = memory_at_peak.passes(graph, loss)
    small = graph.num_nodes <= what_if.PLACE_AGAIN_MAX_NODES
    again = small if place_again is None else place_again
    return {
        "format": FORMAT, "version": VERSION,
        "algorithm": placed.report.get("algorithm"), "devices": placed.cluster.names,
        "num_nodes": graph.num_nodes,
        "layers": {"by": layers.by, "count": len(layers.names),
                   "loss": None if loss is None else graph.names[loss], "table": layer_table(placed, layers)},
        "step": {"makespan_us": placed.schedule.makespan, **step.bounds(placed),
                 "path": {**step.path_totals(segments), "ops": int(len(nodes)), "transfers": int(len(transfers))},
                 "path_by_layer": path_rows,
                 "transfers": step.costliest_transfers(placed, layers, nodes, transfers, top),
                 "devices": step.device_time(placed)},
        "micro_batches": _micro_batches(placed.report),
        "recompute": placed.report.get("recompute"),
        "memory_order": placed.report.get("memory_order"),
        "host_fetch": placed.report.get("host_fetch"),
        "memory": memory_at_peak.at_peaks(placed, layers, forward, backward),
        "what_if": _what_ifs(placed, layers, path_rows, again, small, budget_s),
    }


def _micro_batches(report) -> dict | None:
    """A step of micro-batches: how many, the order it carries, each order's step and
    the bubble (report.json's micro-batches section); None for other steps."""
    if "micro_batches" not in report:
        return None
    return {key: report[key] for key in ("micro_batches", "schedule", "schedules", "bubble")}


def _what_ifs(placed, layers, path_rows, again, small, budget_s) -> list:
    """The what-if rows (pardnn.explain.what_if); on one device, only those that apply."""
    several = placed.cluster.num_devices > 1
    return ([what_if.device_count(placed, -1, again, budget_s)] if several else []) + [
        what_if.device_count(placed, 1, again, budget_s)] + ([what_if.wider_links(placed)] if several else []) + [
        what_if.other_candidate(placed, small)] + ([what_if.best_layer_move(placed, layers, path_rows)]
                                                   if several else [])


def layer_table(placed, layers) -> list:
    """Per layer, its nodes and compute time on each device, most compute first: the
    columns add up to report.json's nodes_per_device and busy_us."""
    k = placed.cluster.num_devices
    cell = layers.of.astype(np.int64) * k + placed.device
    size = len(layers.names) * k
    nodes = np.bincount(cell, minlength=size).reshape(-1, k)
    busy = np.bincount(cell, placed.graph.comp_us, minlength=size).reshape(-1, k)
    order = np.lexsort((np.arange(len(layers.names)), -busy.sum(axis=1)))
    return [{"layer": layers.names[i], "nodes": [int(x) for x in nodes[i]], "busy_us": [float(x) for x in busy[i]]}
            for i in order.tolist()]

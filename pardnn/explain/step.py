"""What sets the step time: the bound that binds, the critical path by layer, the
transfers that cost it most, and where each device's time goes.

- The bounds are report.json's lower_bound_us taken apart, as
  pardnn.pipeline.bounds.step_lower_bound gives them (docs/bounds.md): the critical
  path with free communication, total work / K, the forced transfers, the interval
  bound (small graphs) and the exact model's (at most 400 nodes), each op at its
  fastest device's time. The one that binds is the largest, the first of that order
  on ties; the gap is step / bound.
- The critical path (pardnn.emulator.critical_path) is cut into segments that tile
  [0, step]: an op's run, a transfer (from its producer's finish to its arrival, with
  the time it queued for its link), and the rest before the op starts. An op's
  run counts as compute when the chain reaches it through data (its consumer on the
  chain waited for its output) or it ends the step, and as waiting for a busy device
  when the op after it on the chain was ready but its device was running this one.
  A transfer counts for the layer of the op it feeds; an op's run for its own layer.
  So the shares of all layers add up to the step.
- Per device, busy + idle with an input on the wire + idle with nothing to run is the
  step: idle time overlapping a transfer into the device (from its producer's finish
  to its arrival) is waiting for inputs; the rest of the idle time it had nothing it
  could run (its next ops wait on ops elsewhere still running, or it is done).
"""

from __future__ import annotations

import numpy as np

from pardnn.emulator.critical_path import critical_chain
from pardnn.pipeline.bounds import step_lower_bound

BOUND_NAMES = {"critical_path_us": "critical path", "work_per_device_us": "work / K",
               "forced_transfers_us": "forced transfers", "interval_us": "interval bound",
               "exact_model_us": "exact model"}      # one per part of StepLowerBound (PARTS)


def bounds(placed) -> dict:
    """The bounds, which binds, and the gap (module docstring); `lower_bound_us` is
    their largest, which is report.json's."""
    found = step_lower_bound(placed.graph, placed.cluster)
    bound, step = found.us, placed.schedule.makespan
    return {"bounds": found.parts, "lower_bound_us": bound, "binding": BOUND_NAMES[found.binding],
            "gap": step / bound if bound > 0 else 1.0}


def path_segments(placed):
    """The critical path as segments tiling [0, step]: arrays (kind, node, length_us),
    kind 0 compute, 1 transfer, 2 waiting for a busy device, node the op the segment
    counts for; and the chain's (nodes, transfers) (pardnn.emulator.critical_path)."""
    graph, schedule = placed.graph, placed.schedule
    nodes, transfers, by_data = critical_chain(graph, placed.device, schedule)
    fed = _fed_by(graph, schedule, nodes, transfers)
    kinds, owners, ends = [], [], []
    t = 0.0
    for i, v in enumerate(nodes.tolist()):
        x = fed.get(i)
        if x is not None:                           # producer's finish, queue, link, latency
            t = _segment(kinds, owners, ends, t, float(schedule.transfer_arrival[x]), 1, v)
        t = _segment(kinds, owners, ends, t, float(schedule.start[v]), 1 if x is not None else 0, v)
        t = _segment(kinds, owners, ends, t, float(schedule.finish[v]), 0 if by_data[i] else 2, v)
    lengths = np.diff(np.concatenate([[0.0], ends]))
    return (np.array(kinds, np.int8), np.array(owners, np.int64), lengths), nodes, transfers


def _segment(kinds, owners, ends, t, until, kind, node):
    """Adds the segment [t, until) of `kind` for `node` (nothing when empty); returns
    the new end."""
    if until > t:
        kinds.append(kind)
        owners.append(node)
        ends.append(until)
        return until
    return t


def _fed_by(graph, schedule, nodes, transfers) -> dict:
    """{position on the chain: the path transfer that fed that op}: a transfer feeds
    the op after its producer on the chain."""
    position = {v: i for i, v in enumerate(nodes.tolist())}
    sources = graph.edge_src[schedule.transfer_edge[transfers]].tolist()
    return {position[u] + 1: x for x, u in zip(transfers.tolist(), sources)}


def path_by_layer(placed, layers, segments) -> list:
    """Per layer with a share of the path: compute, transfer and device-wait time and
    their total, largest total first (ties by layer order)."""
    kinds, owners, lengths = segments
    table = np.zeros((len(layers.names), 3))
    np.add.at(table, (layers.of[owners], kinds.astype(np.int64)), lengths)
    total = table.sum(axis=1)
    order = [i for i in np.argsort(-total, kind="stable").tolist() if total[i] > 0]
    step = placed.schedule.makespan
    return [{"layer": layers.names[i], "compute_us": float(table[i, 0]), "transfer_us": float(table[i, 1]),
             "device_wait_us": float(table[i, 2]), "total_us": float(total[i]),
             "share": float(total[i] / step) if step > 0 else 0.0} for i in order]


def path_totals(segments) -> dict:
    """The path's compute, transfer and device-wait time (they add up to the step)."""
    kinds, _, lengths = segments
    return {key: float(lengths[kinds == k].sum())
            for k, key in enumerate(("compute_us", "transfer_us", "device_wait_us"))}


def costliest_transfers(placed, layers, nodes, transfers, top) -> list:
    """The `top` transfers on the path that cost it most: from their producer's finish
    to their arrival, with the time queued for the link, bytes, link and layers."""
    graph, schedule, cluster = placed.graph, placed.schedule, placed.cluster
    if len(transfers) == 0:
        return []
    edge = schedule.transfer_edge[transfers]
    src = graph.edge_src[edge]
    ready = schedule.finish[src]
    cost = schedule.transfer_arrival[transfers] - ready
    position = {v: i for i, v in enumerate(nodes.tolist())}
    rows = []
    for j in np.argsort(-cost, kind="stable")[:top].tolist():
        u = int(src[j])
        v = int(nodes[position[u] + 1])
        slot = int(graph.edge_slot[edge[j]])
        rows.append({"tensor": f"{graph.names[u]}:{slot}" if slot >= 0 else f"^{graph.names[u]}",
                     "bytes": int(schedule.transfer_bytes[transfers[j]]),
                     "from_device": cluster.names[int(placed.device[u])],
                     "to_device": cluster.names[int(schedule.transfer_dst[transfers[j]])],
                     "from_layer": layers.names[layers.of[u]], "to_layer": layers.names[layers.of[v]],
                     "to_node": graph.names[v], "cost_us": float(cost[j]),
                     "queued_us": float(schedule.transfer_send[transfers[j]] - ready[j])})
    return rows


def device_time(placed) -> list:
    """Per device: busy, idle with an input on the wire, idle with nothing to run
    (module docstring); the three add up to the step."""
    graph, schedule, device = placed.graph, placed.schedule, placed.device
    step = schedule.makespan
    issued = schedule.finish[graph.edge_src[schedule.transfer_edge]]
    rows = []
    for d in range(placed.cluster.num_devices):
        mine = np.flatnonzero(device == d)
        busy = float(schedule.busy_us[d])
        into = schedule.transfer_dst == d
        wire = _union(issued[into], schedule.transfer_arrival[into])
        runs = _union(schedule.start[mine], schedule.finish[mine])
        both = _union(np.concatenate([schedule.start[mine], issued[into]]),
                      np.concatenate([schedule.finish[mine], schedule.transfer_arrival[into]]))
        waiting = max(0.0, wire + runs - both)              # wire time overlapping runs
        idle_inputs = wire - waiting
        rows.append({"device": placed.cluster.names[d], "nodes": int(len(mine)), "busy_us": busy,
                     "idle_inputs_us": idle_inputs, "idle_nothing_us": max(0.0, step - busy - idle_inputs)})
    return rows


def _union(lo, hi) -> float:
    """Length of the union of the intervals [lo, hi): sorted by start, each adds what
    reaches past every one before it."""
    if len(lo) == 0:
        return 0.0
    order = np.argsort(lo, kind="stable")
    lo, hi = lo[order], hi[order]
    before = np.concatenate([[-np.inf], np.maximum.accumulate(hi)[:-1]])
    return float(np.maximum(0.0, hi - np.maximum(lo, before)).sum())

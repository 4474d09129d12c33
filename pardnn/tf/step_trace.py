"""A step TF really ran, as a trace with the emulated step's track names
(pardnn.io.trace_events): what `pardnn run --trace` writes.

From the RunMetadata of a traced step (`trace_level=FULL_TRACE`): every node_stats
record of a device becomes an op on that device's "ops" thread (name = node name,
op type from its timeline label, start = all_start, duration = all_end_rel, from the
earliest record of the step); records of a device's streams (on a GPU,
".../stream:all" with the kernels, ".../memcpy" with the copies) go on a thread of
that device named after the stream. TF runs independent ops of one device at once
(its inter-op thread pool), and a viewer draws only nested events on one thread, so
an op that starts before the one before it ends goes on another thread "ops 2",
"ops 3", ...: the device's busy time is the sum over its "ops" threads. The memory
counter is the running total of the device's allocation records
(pardnn.tf.allocations), so it counts what the step allocated, not the variables
held before it. TF records no transfers between CPU
devices of one process (their Send/Recv pass tensors by reference), so a CPU run
has no "links" process.
"""

from __future__ import annotations

import heapq
import re

import numpy as np

from pardnn.io.trace_events import OPS_THREAD, memory_events, op_events, thread_name, tracks
from pardnn.tf.allocations import allocation_records, in_use

_STREAM = re.compile(r"^(.*?/device:[^/]+)(?:/(.+))?$")


def measured_step(run_metadata) -> list:
    """Trace events of the step recorded in `run_metadata`."""
    rows = _records(run_metadata.step_stats)
    if not rows:
        return []
    devices = sorted({device for device, *_ in rows}, key=_natural)
    pid = {d: i for i, d in enumerate(devices)}
    zero = min(start for *_, start, _ in rows)
    groups = _by_thread(rows)
    threads = sorted((key for key in groups if key[1:] != (OPS_THREAD, 0)), key=str)
    tid = {key: i for i, key in enumerate(threads, 1)}
    events = tracks(devices)
    events += [thread_name(pid[d], tid[d, s, lane], f"{s} {lane + 1}" if lane else s) for d, s, lane in threads]
    for (device, stream, lane), group in groups.items():
        names, ops, start, end = zip(*[(n, o, b, e) for _, _, n, o, b, e in group])
        start, end = ((np.asarray(x, np.int64) - zero) / 1e3 for x in (start, end))   # ns -> us
        events += op_events(np.full(len(names), pid[device]), names, ops, start, end,
                            tid=tid.get((device, stream, lane), 0))
    end = (max(e for *_, e in rows) - zero) / 1e3
    for device, records in sorted(allocation_records(run_metadata.step_stats).items()):
        if device in pid and records:
            times, levels = in_use([(t * 1000 - zero, b) for t, b in records])
            events += memory_events(pid[device], np.maximum(times / 1e3, 0.0), levels, end)
    return events


def _records(step_stats):
    """(device, stream or "ops", node name, op type, start ns, end ns) per record."""
    rows = []
    for dev in step_stats.dev_stats:
        match = _STREAM.match(dev.device)
        device, stream = (match.group(1), match.group(2) or OPS_THREAD) if match else (dev.device, OPS_THREAD)
        for ns in dev.node_stats:
            start = ns.all_start_nanos or ns.all_start_micros * 1000
            length = ns.all_end_rel_nanos or ns.all_end_rel_micros * 1000
            label = ns.timeline_label.partition(" = ")[2]
            rows.append((device, stream, ns.node_name, label.partition("(")[0] or ns.node_name,
                         start, start + length))
    return rows


def _by_thread(rows) -> dict:
    """{(device, stream, lane): its records}: the records of each (device, stream) by
    start, each on a lane free when it starts (the one free the longest)."""
    groups = {}
    for row in sorted(rows, key=lambda r: (r[0], r[1], r[4], r[5])):
        lanes = groups.setdefault(row[:2], [])       # [(end of last record, lane)] heap
        lane = heapq.heappop(lanes)[1] if lanes and lanes[0][0] <= row[4] else len(lanes)
        heapq.heappush(lanes, (row[5], lane))
        groups.setdefault((*row[:2], lane), []).append(row)
    return {key: group for key, group in groups.items() if len(key) == 3}


def _natural(name: str):
    """Sort key putting CPU:2 before CPU:10."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]

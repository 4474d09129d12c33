"""One training step as a Chrome Trace Event file (trace.json), the JSON that
Perfetto (ui.perfetto.dev) and chrome://tracing open (docs/views.md).

The emulated step (pardnn.emulator.trace, from the emulator's Schedule) and the
measured one (pardnn.tf.step_trace, from TF's step stats) share this layout, so the plan
and the run open side by side with the same track names:
- one process per device, named by its full TF device name (pid = device index),
  whose thread "ops" holds each op as a complete event ("X": name = node name,
  args.op = op type, ts = start, dur = duration, in microseconds from the step's
  start), and whose counter "memory" ("C", args.bytes) is the memory in use there;
- a process "links" with one thread per link ("CPU:0 -> CPU:1") holding the
  transfers (name = tensor, args.bytes); a transfer's dur is the time it occupies
  the link, args.arrival when it landed;
- the critical path: its ops and transfers carry args.critical_path = true, and
  flow arrows ("s"/"f", cat "critical_path") lead from each of its ops to the next.

Times are written to the nanosecond; an event's end is rounded like its start, so
events of one thread never overlap after rounding. A memory timeline longer than
2 x MEMORY_POINTS points is reduced to its maximum per bin (peaks stay), so a
200k-node step gives a trace of its ops and transfers plus a bounded counter.
"""

from __future__ import annotations

import itertools
import json
import os
from json.encoder import encode_basestring_ascii as _str

import numpy as np


OPS_THREAD = "ops"
LINKS_PROCESS = "links"
MEMORY_COUNTER = "memory"
MEMORY_POINTS = 5000
_WRITE_SLICE = 10000      # events joined and written at once


def short_names(names) -> list:
    """Device names without the prefix they all share ("/job:localhost/.../device:")."""
    cut = [n.rsplit("device:", 1)[-1] for n in names]
    return cut if len(set(cut)) == len(cut) else list(names)


def tracks(devices, links=()) -> list:
    """Metadata events naming the device processes (pid = index) and their "ops"
    thread, and the "links" process (pid = len(devices)) with one thread per link
    name in `links` (tid = position + 1)."""
    events = []
    for pid, name in enumerate(devices):
        events += [_meta("process_name", pid, 0, name), _meta("process_sort_index", pid, 0, pid),
                   thread_name(pid, 0, OPS_THREAD)]
    if len(links):
        pid = len(devices)
        events += [_meta("process_name", pid, 0, LINKS_PROCESS), _meta("process_sort_index", pid, 0, pid)]
        events += [thread_name(pid, tid, name) for tid, name in enumerate(links, 1)]
    return events


def thread_name(pid, tid, name) -> str:
    """The metadata event naming thread `tid` of process `pid`."""
    return _meta("thread_name", pid, tid, name)


def op_events(pid, names, ops, start, finish, critical=None, tid=0) -> list:
    """Complete events of ops (arrays or lists, one entry per op; pid per op)."""
    ts, dur = _rounded(start, finish)
    marks = _marks(critical, len(ts))
    types = {o: _str(o) for o in set(ops)}
    return [f'{{"ph":"X","pid":{p},"tid":{tid},"ts":{t:.3f},"dur":{d:.3f},"name":{_str(n)},'
            f'"cat":"op","args":{{"op":{types[o]}{m}}}}}'
            for p, n, o, t, d, m in zip(np.asarray(pid).tolist(), names, ops, ts, dur, marks)]


def transfer_events(pid, tid, names, start, finish, nbytes, arrival, critical=None) -> list:
    """Complete events of transfers on link threads (tid per transfer)."""
    ts, dur = _rounded(start, finish)
    marks = _marks(critical, len(ts))
    return [f'{{"ph":"X","pid":{pid},"tid":{t_id},"ts":{t:.3f},"dur":{d:.3f},"name":{_str(n)},'
            f'"cat":"transfer","args":{{"bytes":{b},"arrival":{a:.3f}{m}}}}}'
            for t_id, n, t, d, b, a, m in zip(np.asarray(tid).tolist(), names, ts, dur,
                                               np.asarray(nbytes).tolist(), np.asarray(arrival).tolist(),
                                               marks)]


def memory_events(pid, times, levels, end) -> list:
    """Counter events of the bytes in use on device `pid` from times[i] on."""
    times, levels = max_per_bin(np.asarray(times, float), np.asarray(levels, np.int64), end, MEMORY_POINTS)
    return [f'{{"ph":"C","pid":{pid},"tid":0,"ts":{t:.3f},"name":"{MEMORY_COUNTER}","args":{{"bytes":{b}}}}}'
            for t, b in zip(np.round(times, 3).tolist(), np.asarray(levels).tolist())]


def flow_events(pid, start) -> list:
    """Flow arrows from each op of a chain (pid and start per op, in order) to the next."""
    pid, ts = np.asarray(pid).tolist(), np.round(np.asarray(start, float), 3).tolist()
    events = []
    for i in range(len(ts) - 1):
        events += [f'{{"ph":"s","id":{i},"pid":{pid[i]},"tid":0,"ts":{ts[i]:.3f},'
                   f'"name":"critical path","cat":"critical_path"}}',
                   f'{{"ph":"f","bp":"e","id":{i},"pid":{pid[i + 1]},"tid":0,"ts":{ts[i + 1]:.3f},'
                   f'"name":"critical path","cat":"critical_path"}}']
    return events


def write_trace(path, events, about=None) -> None:
    """Write `events` (an iterable of JSON strings) as a trace file, through a temporary
    file and a rename; `about` goes into otherData (shown by the viewers as metadata).
    Written a slice of events at a time: a million-node step's events joined whole
    would be a second copy of them, and a third encoded."""
    tmp = f"{path}.tmp{os.getpid()}"
    events = iter(events)
    try:
        with open(tmp, "w") as f:
            f.write('{"displayTimeUnit":"ns","otherData":')
            json.dump(about or {}, f)
            f.write(',"traceEvents":[\n')
            first = True
            while part := list(itertools.islice(events, _WRITE_SLICE)):
                f.write(("" if first else ",\n") + ",\n".join(part))
                first = False
            f.write("\n]}\n")
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def _rounded(start, finish):
    """(ts, dur) in microseconds with start and end rounded to the nanosecond."""
    start = np.round(np.asarray(start, float), 3)
    end = np.maximum(np.round(np.asarray(finish, float), 3), start)
    return start.tolist(), (end - start).tolist()


def _marks(critical, n):
    if critical is None:
        return [""] * n
    return [',"critical_path":true' if c else "" for c in np.asarray(critical).tolist()]


def _meta(kind, pid, tid, value):
    key = "sort_index" if kind.endswith("sort_index") else "name"
    return json.dumps({"ph": "M", "pid": pid, "tid": tid, "name": kind, "args": {key: value}})


def max_per_bin(times, levels, end, bins):
    """The step function (times, levels), reduced to its maximum in each of `bins`
    equal bins of [0, end] when it has more than 2 x bins points."""
    if len(times) <= 2 * bins:
        return times, levels
    edges = np.linspace(0.0, end, bins + 1)
    at_edge = levels[np.maximum(np.searchsorted(times, edges[:-1], side="right") - 1, 0)]
    inside = np.clip(np.searchsorted(edges, times, side="right") - 1, 0, bins - 1)
    np.maximum.at(at_edge, inside, levels)
    return edges[:-1], at_edge

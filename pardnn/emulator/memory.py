"""Memory per device over one emulated step, and memory potentials (thesis §4.1.2,
"Tracking Memory Consumption", Eq. 4.3 and M_pot in Table 4.2).

Given a Schedule (pardnn.emulator.scheduler), every byte on a device is one of:
- resident: held for the whole step. The output (`out_bytes`) of a RESIDUAL node (a
  variable, an optimizer slot) and the `persist_bytes` of every NORMAL or RESIDUAL node
  (state TF keeps across steps) — Eq. 4.3, first term.
- a NORMAL node's output: `out_bytes` allocated when the node starts and freed when its
  last consumer on that device finishes (Eq. 4.3, second and third terms). The thesis
  text is garbled about outputs that leave the device; we keep them until every
  transfer of them has landed (the Send reads the buffer), and at least until the node
  finishes, so a node with no consumers holds its output while it runs.
- a received copy: the tensor's bytes on the destination device from the transfer's
  arrival until its last consumer there finishes.
- an op's scratch memory (`temp_bytes`: cuDNN workspaces, the temporaries TF's step
  stats record as `temp_memory_size`) on its device while it runs, [start, finish).
  Eq. 4.3 has no such term; without it a placement that fits by the emulator can run
  out of memory for real. Scratch is part of the running node's M_pot.
- REFERENCE nodes allocate nothing (they alias the variable they refer to).
Only data edges (slot >= 0) keep a tensor alive; control edges carry no buffer.

Buffers live on half-open intervals [alloc, free): at one instant, frees happen before
allocations, so a kernel may reuse what the op before it released (this is what makes
the peaks of thesis Fig. 4.3 come out as printed). A zero-length interval holds nothing.

The memory potential M_pot(n, t) (Table 4.2) is what moving n off its device would free
there at time t: the buffers on that device whose lifetime n alone ends (n is the local
consumer whose finish frees them: its inputs' outputs and received copies) that are
complete at t (producer finished, or copy arrived: "executed before t") and not yet
freed, plus n's own output while n runs (st(n) <= t < ft(n); the table's strict
`st(n) < t` would leave out the node whose start caused an overflow, so we use <=). A
buffer still being written counts for its producer only, never twice.

Cost: the buffers come from passes over nodes and edges, O(V + E) (numpy's on small
graphs, one kernel on large ones); the per-device timelines need one sort of the
2(V + E) events by time (numpy's), then one pass that gathers each device's events (a
counting sort).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from pardnn.base.compiled import INTERPRETED_BELOW, kernel
from pardnn.graph import NORMAL, REFERENCE, RESIDUAL


@dataclass(frozen=True, eq=False)
class MemoryProfile:
    """Per-device memory of one emulated step. Buffers are rows of the `buf_*` arrays."""

    resident_bytes: np.ndarray  # int64 per device: held all step
    buf_device: np.ndarray      # int64 per buffer
    buf_alloc: np.ndarray       # float64: allocation time (us)
    buf_free: np.ndarray        # float64: release time (us); buffers have alloc < free
    buf_bytes: np.ndarray       # int64
    buf_node: np.ndarray        # int64: producer node
    buf_owner: np.ndarray       # int64: the local consumer whose finish frees it, or -1
    buf_ready: np.ndarray       # float64: when it is complete (producer finished / arrived)
    time_ptr: np.ndarray        # int64, K + 1: device d's timeline is [time_ptr[d], time_ptr[d+1])
    times: np.ndarray           # float64: event times, increasing within a device
    levels: np.ndarray          # int64: bytes in use from times[i] until the next event
    peak_bytes: np.ndarray      # int64 per device
    peak_time_us: np.ndarray    # float64 per device: first time the peak is reached
    node_device: np.ndarray     # int64 per node
    node_running: tuple         # (start, finish, bytes of own output) per node, for M_pot

    def timeline(self, d: int):
        """(times, levels) of device d: bytes in use from times[i] until times[i+1]."""
        lo, hi = self.time_ptr[d], self.time_ptr[d + 1]
        return self.times[lo:hi], self.levels[lo:hi]

    def level_at(self, d: int, t: float) -> int:
        """Bytes in use on device d at time t (after the events at t)."""
        times, levels = self.timeline(d)
        return int(levels[max(np.searchsorted(times, t, side="right") - 1, 0)])

    def potentials(self, d: int, t: float):
        """(nodes, bytes) with M_pot(n, t) > 0 for the nodes n on device d, by node id."""
        live = (self.buf_device == d) & (self.buf_ready <= t) & (t < self.buf_free) & (self.buf_owner >= 0)
        pot = np.bincount(self.buf_owner[live], self.buf_bytes[live], minlength=len(self.node_device))
        start, finish, own = self.node_running
        running = (self.node_device == d) & (start <= t) & (t < finish)
        pot[running] += own[running]
        nodes = np.flatnonzero(pot > 0)
        return nodes, pot[nodes].astype(np.int64)

    def potential(self, n: int, t: float) -> int:
        """M_pot(n, t) in bytes on n's device."""
        nodes, pot = self.potentials(int(self.node_device[n]), t)
        i = np.searchsorted(nodes, n)
        return int(pot[i]) if i < len(nodes) and nodes[i] == n else 0


def track_memory(graph, cluster, device, schedule) -> MemoryProfile:
    """Memory per device over the step emulated in `schedule` (see the module docstring)."""
    k = cluster.num_devices
    device = np.asarray(device, np.int64)
    resident = _resident(graph, device, k)
    dev, alloc, free, nbytes, node, owner, ready = _buffers(graph, device, schedule)
    scratch = np.flatnonzero((graph.temp_bytes > 0) & (schedule.finish > schedule.start))
    time_ptr, times, levels = _timelines(
        k, resident, np.concatenate([dev, device[scratch]]),
        np.concatenate([alloc, schedule.start[scratch]]), np.concatenate([free, schedule.finish[scratch]]),
        np.concatenate([nbytes, graph.temp_bytes[scratch]]), graph.num_nodes)
    peak_bytes, peak_time = _peaks(k, time_ptr, times, levels)
    own = np.where(graph.kind == NORMAL, graph.out_bytes, 0) + graph.temp_bytes
    return MemoryProfile(
        resident_bytes=resident, buf_device=dev, buf_alloc=alloc, buf_free=free, buf_bytes=nbytes,
        buf_node=node, buf_owner=owner, buf_ready=ready, time_ptr=time_ptr, times=times, levels=levels,
        peak_bytes=peak_bytes, peak_time_us=peak_time, node_device=device,
        node_running=(schedule.start, schedule.finish, own))


def _resident(graph, device, k):
    held = np.where(graph.kind == RESIDUAL, graph.out_bytes, 0)
    held = held + np.where(graph.kind == REFERENCE, 0, graph.persist_bytes)
    return np.bincount(device, held, minlength=k).astype(np.int64)


def _buffers(graph, device, schedule):
    """The step's buffers that hold bytes for some time, as columns (device, alloc,
    free, bytes, producer, owner, ready): the NORMAL nodes' outputs in node order, then
    the received copies in transfer order. Graphs of INTERPRETED_BELOW nodes or more
    run the kernel `_buffer_columns`, smaller ones numpy (`_buffers_by_numpy`): the
    same columns."""
    if graph.num_nodes < INTERPRETED_BELOW:
        return _buffers_by_numpy(graph, device, schedule)
    s = schedule
    return _buffer_columns.compiled(
        graph.kind == NORMAL, graph.out_bytes.astype(np.int64), device, s.start, s.finish,
        Edges(graph.edge_src, graph.edge_dst, graph.edge_slot >= 0, s.edge_transfer),
        Sent(s.transfer_edge, s.transfer_dst, s.transfer_bytes, s.transfer_arrival))


def _buffers_by_numpy(graph, device, schedule):
    """`_buffers` by numpy's scatter-maxima over the edges."""
    bufs = [_own_outputs(graph, device, schedule), _received_copies(graph, schedule)]
    cols = [np.concatenate(col) for col in zip(*bufs)]
    keep = (cols[2] > cols[1]) & (cols[3] > 0)
    return tuple(col[keep] for col in cols)


def _last_consumer(n_groups, group, finish, consumer):
    """Per group: the latest consumer finish and who (ties: highest consumer id); -inf
    and -1 if none; by two scatter-maxima (numpy's `maximum.at`), not a sort."""
    free = np.full(n_groups, -np.inf)
    np.maximum.at(free, group, finish)
    latest = np.flatnonzero(finish == free[group])
    who = np.full(n_groups, -1, np.int64)
    np.maximum.at(who, group[latest], consumer[latest])
    return free, who


def _own_outputs(graph, device, schedule):
    """Buffers of NORMAL nodes' outputs on their own device."""
    n = graph.num_nodes
    src, dst = graph.edge_src, graph.edge_dst
    data = graph.edge_slot >= 0
    local = np.flatnonzero(data & (device[src] == device[dst]))
    consumer_free, owner = _last_consumer(n, src[local].astype(np.int64),
                                          schedule.finish[dst[local]], dst[local].astype(np.int64))
    moved = np.flatnonzero(schedule.edge_transfer >= 0)
    moved = moved[data[moved]]
    sent_free, _ = _last_consumer(n, src[moved].astype(np.int64),
                                  schedule.transfer_arrival[schedule.edge_transfer[moved]], moved)
    other = np.maximum(schedule.finish, sent_free)
    owner = np.where(consumer_free > other, owner, -1)
    free = np.maximum(consumer_free, other)
    normal = np.flatnonzero(graph.kind == NORMAL)
    return (device[normal], schedule.start[normal], free[normal], graph.out_bytes[normal],
            normal.astype(np.int64), owner[normal], schedule.finish[normal])


def _received_copies(graph, schedule):
    """Buffers of transferred tensors on their destination devices."""
    m = len(schedule.transfer_edge)
    moved = np.flatnonzero(schedule.edge_transfer >= 0)
    moved = moved[graph.edge_slot[moved] >= 0]
    consumer = graph.edge_dst[moved].astype(np.int64)
    free, owner = _last_consumer(m, schedule.edge_transfer[moved], schedule.finish[consumer], consumer)
    nbytes = np.where(graph.edge_slot[schedule.transfer_edge] >= 0, schedule.transfer_bytes, 0)
    return (schedule.transfer_dst.astype(np.int64), schedule.transfer_arrival, free, nbytes,
            graph.edge_src[schedule.transfer_edge].astype(np.int64), owner, schedule.transfer_arrival)


class Edges(NamedTuple):
    """The graph's edges as `_buffer_columns` reads them."""

    src: np.ndarray
    dst: np.ndarray
    data: np.ndarray        # bool: carries a tensor (slot >= 0)
    transfer: np.ndarray    # the emulated transfer it rides, or -1 (same device)


class Sent(NamedTuple):
    """The emulated step's transfers (pardnn.emulator.scheduler.Schedule)."""

    edge: np.ndarray        # the edge each transfer was issued for
    dst: np.ndarray         # its destination device
    nbytes: np.ndarray
    arrival: np.ndarray


@kernel
def _buffer_columns(normal, out_bytes, device, start, finish, edges, sent_):
    """`_buffers_by_numpy` in one pass over the Edges (each node's and each copy's
    latest local reader, ties to the highest node id, and each node's latest send)
    and one over the nodes and the transfers Sent, keeping the buffers that hold bytes."""
    edge_src, edge_dst, data, edge_transfer = edges
    transfer_edge, transfer_dst, transfer_bytes, arrival = sent_
    n, m = start.shape[0], transfer_edge.shape[0]
    local_free, owner, sent = np.full(n, -np.inf), np.full(n, -1, np.int64), np.full(n, -np.inf)
    copy_free, copy_owner = np.full(m, -np.inf), np.full(m, -1, np.int64)
    for e in range(edge_src.shape[0]):
        u, v, t = edge_src[e], edge_dst[e], edge_transfer[e]
        if not data[e]:
            continue
        later = finish[v] > local_free[u] or (finish[v] == local_free[u] and v > owner[u])
        if device[u] == device[v] and later:
            local_free[u], owner[u] = finish[v], v
        if t >= 0:
            sent[u] = max(sent[u], arrival[t])
            if finish[v] > copy_free[t] or (finish[v] == copy_free[t] and v > copy_owner[t]):
                copy_free[t], copy_owner[t] = finish[v], v
    size = n + m
    dev, alloc, free, nbytes = np.empty(size, np.int64), np.empty(size), np.empty(size), np.empty(size, np.int64)
    node, who, ready = np.empty(size, np.int64), np.empty(size, np.int64), np.empty(size)
    c = 0
    for u in range(n):
        other = finish[u] if finish[u] >= sent[u] else sent[u]
        end = local_free[u] if local_free[u] > other else other
        if normal[u] and end > start[u] and out_bytes[u] > 0:
            dev[c], alloc[c], free[c], nbytes[c] = device[u], start[u], end, out_bytes[u]
            node[c], who[c], ready[c] = u, owner[u] if local_free[u] > other else -1, finish[u]
            c += 1
    for t in range(m):
        if data[transfer_edge[t]] and copy_free[t] > arrival[t] and transfer_bytes[t] > 0:
            dev[c], alloc[c], free[c], nbytes[c] = transfer_dst[t], arrival[t], copy_free[t], transfer_bytes[t]
            node[c], who[c], ready[c] = edge_src[transfer_edge[t]], copy_owner[t], arrival[t]
            c += 1
    return (dev[:c].copy(), alloc[:c].copy(), free[:c].copy(), nbytes[:c].copy(), node[:c].copy(),
            who[:c].copy(), ready[:c].copy())


def _timelines(k, resident, dev, alloc, free, nbytes, nodes):
    """Per-device step functions of bytes in use, one point per distinct event time:
    (time_ptr, times, levels). The events sorted by time are sorted by device and summed
    by the kernel `_levels` on graphs of INTERPRETED_BELOW `nodes` or more, by numpy
    (`_levels_by_numpy`) on smaller ones: the same step functions."""
    ev_dev = np.concatenate([np.arange(k), dev, dev])
    ev_time = np.concatenate([np.zeros(k), alloc, free])
    ev_delta = np.concatenate([resident, nbytes, -nbytes])
    by_time = np.argsort(ev_time)
    if nodes < INTERPRETED_BELOW:
        return _levels_by_numpy(k, by_time, ev_dev, ev_time, ev_delta)
    return _levels.compiled(k, by_time, ev_dev, ev_time, ev_delta)


def _levels_by_numpy(k, by_time, ev_dev, ev_time, ev_delta):
    """`_timelines` from the events in time order `by_time`: a stable sort by device
    (numpy's radix sort of 16-bit ids), one cumulative sum across all devices, and
    each device's start taken off its own. Within one device and time any order
    does: only the last cumulative level of each such run is kept, and integer sums do
    not depend on their order."""
    small = np.int16 if k < 2**15 else np.int64
    order = by_time[np.argsort(ev_dev[by_time].astype(small), kind="stable")]
    ev_dev, ev_time = ev_dev[order], ev_time[order]
    level = np.cumsum(ev_delta[order])
    last = np.ones(len(order), bool)                        # last event of each (device, time)
    last[:-1] = (ev_dev[1:] != ev_dev[:-1]) | (ev_time[1:] != ev_time[:-1])
    ev_dev, ev_time, level = ev_dev[last], ev_time[last], level[last]
    time_ptr = np.zeros(k + 1, np.int64)
    np.cumsum(np.bincount(ev_dev, minlength=k), out=time_ptr[1:])
    # cumsum ran across devices; subtract what the devices before each one left over
    carry = np.concatenate([[0], level[time_ptr[1:-1] - 1]])
    level = level - np.repeat(carry, np.diff(time_ptr))
    return time_ptr, ev_time, level.astype(np.int64)


@kernel
def _levels(k, by_time, ev_dev, ev_time, ev_delta):
    """`_levels_by_numpy` in three passes: the events of each device gathered in time
    order (a counting sort), the distinct times counted, then each device's levels
    summed from zero, one point kept per distinct time (arrays of the exact size: at
    1M nodes the events are tens of MB)."""
    n = by_time.shape[0]
    start = np.zeros(k + 1, np.int64)
    for i in range(n):
        start[ev_dev[i] + 1] += 1
    for d in range(k):
        start[d + 1] += start[d]
    order, fill = np.empty(n, np.int64), start[:k].copy()
    for i in by_time:
        order[fill[ev_dev[i]]] = i
        fill[ev_dev[i]] += 1
    last = np.zeros(n, np.bool_)                    # the last event of its (device, time)
    for d in range(k):
        for j in range(start[d], start[d + 1]):
            last[j] = j + 1 == start[d + 1] or ev_time[order[j + 1]] != ev_time[order[j]]
    time_ptr = np.zeros(k + 1, np.int64)
    points = int(last.sum())
    times, levels = np.empty(points), np.empty(points, np.int64)
    out = 0
    for d in range(k):
        level = 0
        for j in range(start[d], start[d + 1]):
            level += ev_delta[order[j]]
            if last[j]:
                times[out], levels[out] = ev_time[order[j]], level
                out += 1
        time_ptr[d + 1] = out
    return time_ptr, times, levels


def _peaks(k, time_ptr, times, levels):
    peak = np.maximum.reduceat(levels, time_ptr[:-1])
    at = np.empty(k)
    for d in range(k):
        seg = levels[time_ptr[d]:time_ptr[d + 1]]
        at[d] = times[time_ptr[d] + int(np.argmax(seg == peak[d]))]
    return peak.astype(np.int64), at

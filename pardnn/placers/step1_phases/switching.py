"""Critical-path node switching (thesis §4.1.1, "Refinement", second policy),
judged on the emulated schedule.

The thesis recomputes the critical path of the partitioned graph from levels and
moves a node on a cross-device edge of it when that shortens the path. Levels
ignore that a device runs one op at a time, so on a loaded device a move that
shortens the level-based path can lengthen the step. Here the critical path is the
emulated one, traced back from the last node to finish: a node's start was set
either by its last input to arrive (a data edge, maybe a transfer) or by its
device becoming free (the op that ran before it). For each transfer on that path,
u -> v, two moves are estimated from the emulated times, every other node's times
held fixed:

- v to u's device: v's inputs arrive there, and v runs at once or in the first
  idle gap long enough for it; the gain is how much earlier v finishes.
- u to v's device: likewise for u; the gain is how much earlier v has all its
  inputs (its other inputs still arrive when they do now).

Not in the thesis: the path also steps through queue waits, u -> v, where v was
ready but its device was still running u (FIFO order). Level-based paths cannot see
these, yet on the device holding the first critical path they can be most of the
step (docs/algorithm.md). The move there is u to another
device, into the first idle gap that lets it deliver its outputs in time; the gain
is how much earlier v can start: when u started, or when v was ready.

A move whose node would deliver any output later than that output's consumer now
starts is dropped, as is one to a device its colocation group may not use. A
node moves with its whole colocation group. The chosen moves are returned best
first; the caller emulates them.

The walk back along the path (`_critical_path`) and the estimates of a node's finish
on another device (`_moved_finish`) are kernels (pardnn.base.compiled); the rest is numpy.
"""

from typing import NamedTuple

import numpy as np

from pardnn.base.compiled import kernel

MAX_UNBLOCK = 256   # queue waits per round whose blocking op looks for a device


def critical_moves(graph, cluster, device, schedule, allowed) -> list:
    """[(gain_us, group, device)] for the transfers on the emulated critical path,
    at most one move per transfer and per group, largest gain first."""
    timing = _Timing(graph, cluster, device, schedule, allowed)
    u, v, _, _, _ = timing.critical_path()
    start, finish, du, dv = timing.times.start, timing.times.finish, timing.device[u], timing.device[v]
    consumer = finish[v] - timing.moved_finish(v, du, finish[v])     # v joins u: v finishes earlier
    producer = start[v] - np.maximum(timing.moved_finish(u, dv, start[v]), timing.other_inputs(u, v))
    pick = (producer > consumer) | ((producer == consumer) & (u < v))   # u joins v (ties: the lower id)
    return _best_first(timing, np.where(pick, producer, consumer), np.where(pick, u, v),
                       np.where(pick, dv, du))


def unblock_moves(graph, cluster, device, schedule, allowed) -> list:
    """[(gain_us, group, device)] for the queue waits on the emulated critical path:
    the op a critical op waited for leaves its device; largest gain first."""
    timing = _Timing(graph, cluster, device, schedule, allowed)
    _, _, u, v, ready = timing.critical_path()
    gains = timing.times.start[v] - np.maximum(ready, timing.times.start[u])
    best = np.argsort(-gains, kind="stable")[:MAX_UNBLOCK]
    best = best[gains[best] > 0.0]
    return _best_first(timing, gains[best], u[best], _unblock_targets(timing, u[best], cluster.num_devices))


def _best_first(timing, gain, node, dest) -> list:
    """The options (gain, node, device), in order, with a positive gain, the first of
    each group, as moves [(gain, group, device)], largest gain first."""
    group = timing.edges.group[node]
    ok = np.flatnonzero((gain > 0.0) & (dest != timing.device[node]))
    keep = ok[np.unique(group[ok], return_index=True)[1]]
    keep = keep[np.lexsort((group[keep], -gain[keep]))]
    return list(zip(gain[keep].tolist(), group[keep].tolist(), dest[keep].tolist()))


def _unblock_targets(timing, nodes, k) -> np.ndarray:
    """Per node, the device where it, leaving its own, finishes first (the lower
    device on ties) without delaying any consumer; its own device if there is none."""
    here = timing.device[nodes]
    x, d = np.repeat(nodes, k), np.tile(np.arange(k), len(nodes))
    away = d != np.repeat(here, k)
    ends = np.full(len(x), np.inf)
    ends[away] = timing.moved_finish(x[away], d[away], np.full(int(away.sum()), np.inf))
    ends = ends.reshape(len(nodes), k)
    best = np.argmin(ends, axis=1)
    return np.where(np.isfinite(ends[np.arange(len(nodes)), best]), best, here).astype(np.int64)


class Edges(NamedTuple):
    """The edges both ways and the colocation groups, int64."""

    pred_ptr: np.ndarray
    pred_src: np.ndarray
    pred_eid: np.ndarray
    succ_ptr: np.ndarray
    edge_dst: np.ndarray
    edge_src: np.ndarray
    edge_bytes: np.ndarray
    group: np.ndarray           # per node


class Times(NamedTuple):
    """The emulated schedule: per node its device (int64) and times, per edge the
    arrival of its data at its consumer (float64)."""

    device: np.ndarray
    comp: np.ndarray
    start: np.ndarray
    finish: np.ndarray
    arrival: np.ndarray


class Busy(NamedTuple):
    """Every device's busy intervals (ops with positive compute time) by (start, node):
    device d's are [ptr[d], ptr[d + 1])."""

    ptr: np.ndarray
    start: np.ndarray
    finish: np.ndarray
    node: np.ndarray


class Links(NamedTuple):
    """Where each group may go (bool, groups x devices), and the links (K x K)."""

    allowed: np.ndarray
    latency: np.ndarray         # us
    inv_bandwidth: np.ndarray   # us per byte


class _Timing:
    """The emulated times as the kernels' arrays, and the estimates built on them."""

    def __init__(self, graph, cluster, device, schedule, allowed):
        i64 = np.int64
        self.device = np.asarray(device, i64)
        self.edges = Edges(graph.pred_ptr.astype(i64), graph.pred_src.astype(i64), graph.pred_eid.astype(i64),
                           graph.succ_ptr.astype(i64), graph.edge_dst.astype(i64), graph.edge_src.astype(i64),
                           graph.edge_bytes.astype(i64), graph.group.astype(i64))
        arrival = schedule.finish[graph.edge_src].astype(np.float64)
        cross = schedule.edge_transfer >= 0
        arrival[cross] = schedule.transfer_arrival[schedule.edge_transfer[cross]]
        self.times = Times(self.device, graph.comp_us.astype(np.float64), schedule.start.astype(np.float64),
                           schedule.finish.astype(np.float64), arrival)
        self.busy = _busy_intervals(self.times, cluster.num_devices)
        self.links = Links(np.ascontiguousarray(allowed, np.bool_), cluster.latency_us.astype(np.float64),
                           (1.0 / cluster.bandwidth).astype(np.float64))
        self.size = graph.num_nodes

    def critical_path(self):
        """(u, v) of the transfers and (u, v, when v's last input arrived) of the queue
        waits on the emulated critical path, from its end (`_critical_path`)."""
        return _critical_path.for_size(self.size)(self.edges, self.times, self.busy)

    def moved_finish(self, x, d, deadline) -> np.ndarray:
        """Per (node, device, deadline): the node's finish on that device (`_moved_finish`)."""
        return _moved_finish.for_size(self.size)(self.edges, self.times, self.busy, self.links,
                                                 np.asarray(x, np.int64), np.asarray(d, np.int64),
                                                 np.asarray(deadline, np.float64))

    def other_inputs(self, u, v) -> np.ndarray:
        """Per (u, v): when the last of v's inputs from outside u's group arrives
        (-inf if none)."""
        ptr, counts = self.edges.pred_ptr, np.diff(self.edges.pred_ptr)[v]
        pair = np.repeat(np.arange(len(v)), counts)
        p = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts) + ptr[v][pair]
        outside = self.edges.group[self.edges.pred_src[p]] != self.edges.group[u][pair]
        out = np.full(len(v), -np.inf)
        np.maximum.at(out, pair[outside], self.times.arrival[self.edges.pred_eid[p[outside]]])
        return out


def _busy_intervals(times, k) -> Busy:
    nodes = np.flatnonzero(times.comp > 0)
    nodes = nodes[np.lexsort((nodes, times.start[nodes], times.device[nodes]))]
    ptr = np.concatenate([[0], np.cumsum(np.bincount(times.device[nodes], minlength=k))]).astype(np.int64)
    return Busy(ptr, times.start[nodes], times.finish[nodes], nodes.astype(np.int64))


@kernel
def _critical_path(edges, times, busy):
    """The emulated critical path, traced back from the last node to finish: a node's
    start was set by its last input to arrive (a data edge; a transfer when it crosses
    devices), or else by the op whose end freed its device (a queue wait).
    Returns (transfer u, transfer v, wait u, wait v, wait v's ready time)."""
    n = times.start.shape[0]
    tu, tv, wu, wv, ready_at = (np.empty(n, np.int64), np.empty(n, np.int64), np.empty(n, np.int64),
                                np.empty(n, np.int64), np.empty(n, np.float64))
    nt = nw = 0
    v = np.argmax(times.finish) if n else -1        # each step: an earlier start, or the same and a lower id
    while v >= 0:
        edge, ready = -1, 0.0                       # v's last input to arrive
        for p in range(edges.pred_ptr[v], edges.pred_ptr[v + 1]):
            e = edges.pred_eid[p]
            if edge < 0 or times.arrival[e] > ready:
                edge, ready = e, times.arrival[e]
        if edge >= 0 and times.start[v] == ready:
            u = edges.edge_src[edge]
            if times.device[u] != times.device[v]:
                tu[nt], tv[nt] = u, v
                nt += 1
        else:                                       # the op whose end freed v's device
            d = times.device[v]
            lo = busy.ptr[d]
            i = lo + np.searchsorted(busy.start[lo:busy.ptr[d + 1]], times.start[v], side="left") - 1
            u = busy.node[i] if i >= lo and busy.finish[i] == times.start[v] else -1
            if u >= 0:
                wu[nw], wv[nw], ready_at[nw] = u, v, ready
                nw += 1
        v = u
    return tu[:nt], tv[:nt], wu[:nw], wv[:nw], ready_at[:nw]


@kernel
def _moved_finish(edges, times, busy, links, xs, ds, deadlines):
    """Per query i: node xs[i]'s finish if its group moved to device ds[i], every other
    node's times held: its inputs arrive there, and it runs at once or in the first
    idle gap long enough for it. inf if the group may not go there, if it would not
    finish by deadlines[i], or if it would deliver an output later than that output's
    consumer now starts."""

    def cost(y, g, d, nbytes, incoming):
        """Transfer time between y and a node of group g moved to device d."""
        dy = d if edges.group[y] == g else times.device[y]
        if dy == d:
            return 0.0
        a, b = (dy, d) if incoming else (d, dy)
        return links.latency[a, b] + nbytes * links.inv_bandwidth[a, b]

    def first_gap(d, t, length, deadline):
        """Earliest time >= t at which device d is idle for `length` and done by
        `deadline`; inf if there is none."""
        start, finish = busy.start[busy.ptr[d]:busy.ptr[d + 1]], busy.finish[busy.ptr[d]:busy.ptr[d + 1]]
        i = np.searchsorted(start, t, side="right") - 1
        if i >= 0 and finish[i] > t:
            t = finish[i]
        lo = np.searchsorted(start, t, side="left")
        hi = np.searchsorted(start, deadline - length, side="left")
        gaps = max(hi - lo, 0)
        for j in range(gaps + 1):           # the idle gaps from t: (end, next start) pairs
            end = t if j == 0 else finish[lo + j - 1]
            if j < gaps:
                nxt = start[lo + j]
            else:
                nxt = deadline if hi == start.shape[0] else start[hi]
            if nxt - end >= length:
                return np.inf if end + length > deadline else end
        return np.inf

    def moved(x, d, deadline):
        g = edges.group[x]
        if not links.allowed[g, d]:
            return np.inf
        ready = 0.0
        for p in range(edges.pred_ptr[x], edges.pred_ptr[x + 1]):
            u = edges.pred_src[p]
            arrive = times.finish[u] + cost(u, g, d, edges.edge_bytes[edges.pred_eid[p]], True)
            if arrive > ready:
                ready = arrive
        end = first_gap(d, ready, times.comp[x], deadline) + times.comp[x]
        for e in range(edges.succ_ptr[x], edges.succ_ptr[x + 1]):
            s = edges.edge_dst[e]
            if end + cost(s, g, d, edges.edge_bytes[e], False) > times.start[s]:
                return np.inf
        return end

    out = np.empty(xs.shape[0], np.float64)
    for i in range(xs.shape[0]):
        out[i] = moved(xs[i], ds[i], deadlines[i])
    return out

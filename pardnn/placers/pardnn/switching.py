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
"""

import numpy as np

from pardnn.compiled import kernel

MAX_UNBLOCK = 256   # queue waits per round whose blocking op looks for a device


def critical_moves(graph, cluster, device, schedule, allowed) -> list:
    """[(gain_us, group, device)] for the transfers on the emulated critical path,
    at most one move per transfer and per group, largest gain first."""
    timing = _Timing(graph, cluster, device, schedule)
    transfers, _ = timing.critical_edges()
    return _best_first(timing, [_transfer_move(timing, u, v, allowed) for u, v in transfers])


def unblock_moves(graph, cluster, device, schedule, allowed) -> list:
    """[(gain_us, group, device)] for the queue waits on the emulated critical path:
    the op a critical op waited for leaves its device; largest gain first."""
    timing = _Timing(graph, cluster, device, schedule)
    _, waits = timing.critical_edges()
    gains = [timing.start[v] - max(timing.ready(v), timing.start[u]) for u, v in waits]
    best = sorted(range(len(waits)), key=lambda i: (-gains[i], i))[:MAX_UNBLOCK]
    return _best_first(timing, [(gains[i], *_unblock_target(timing, waits[i][0], allowed,
                                                            cluster.num_devices))
                                for i in best if gains[i] > 0.0])


def _best_first(timing, options) -> list:
    """Moves with a positive gain, one per group, largest gain first."""
    moves, seen = [], set()
    for gain, x, d in options:
        g = timing.group[x]
        if gain > 0.0 and d != timing.dev[x] and g not in seen:
            seen.add(g)
            moves.append((gain, g, d))
    moves.sort(key=lambda m: (-m[0], m[1]))
    return moves


def _transfer_move(timing, u, v, allowed):
    """(gain, node, device): the better of v joining u and u joining v."""
    dv, du = timing.dev[v], timing.dev[u]
    options = [(timing.gain_consumer(v, du, allowed), v, du),
               (timing.gain_producer(u, v, dv, allowed), u, dv)]
    return max(options, key=lambda o: (o[0], -o[1]))


def _unblock_target(timing, u, allowed, k):
    """(u, device): the device where u, leaving its own, finishes first without
    delaying any consumer; its own device if there is none (no move)."""
    here = timing.dev[u]
    ends = [(timing.moved_finish(u, d, allowed, np.inf), d) for d in range(k) if d != here]
    end, d = min(ends, default=(np.inf, here))
    return (u, d) if np.isfinite(end) else (u, here)


class _Timing:
    """Emulated times as Python lists, and the estimates built on them."""

    def __init__(self, graph, cluster, device, schedule):
        self.graph = graph
        self.succ_ptr, self.dst, self.pred_ptr, self.pred_src, self.pred_eid = graph.adjacency_lists
        self.src = graph.edge_src.tolist()
        self.dev, self.group = device.tolist(), graph.group.tolist()
        self.comp = graph.comp_us.tolist()
        self.start, self.finish = schedule.start.tolist(), schedule.finish.tolist()
        arrival = schedule.finish[graph.edge_src].copy()
        cross = schedule.edge_transfer >= 0
        arrival[cross] = schedule.transfer_arrival[schedule.edge_transfer[cross]]
        self.arrival = arrival.tolist()
        self.nbytes = graph.edge_bytes.tolist()
        self.lat, self.inv = cluster.latency_us.tolist(), (1.0 / cluster.bandwidth).tolist()
        self._busy = _busy_intervals(graph, device, schedule, cluster.num_devices)

    def critical_edges(self):
        """(transfers, waits) on the emulated critical path: cross-device edges (u, v),
        and queue waits (u, v) where v, ready, waited for u on its device (none for
        an empty graph)."""
        if not len(self.finish):
            return [], []
        v = int(np.argmax(self.finish))
        transfers, waits = [], []
        while True:
            e, ready = self._last_input(v)
            if e >= 0 and self.start[v] == ready:
                u = self.src[e]
                if self.dev[u] != self.dev[v]:
                    transfers.append((u, v))
            else:
                u = self._op_before(v)
                if u >= 0 and self.comp[u] > 0.0:
                    waits.append((u, v))
            if u < 0:
                return transfers, waits
            v = u

    def ready(self, v) -> float:
        """When v's last input arrived (0 for a node without inputs)."""
        return self._last_input(v)[1]

    def gain_consumer(self, v, d, allowed) -> float:
        """How much earlier v finishes if its group moves to d (-inf: no move)."""
        return self.finish[v] - self.moved_finish(v, d, allowed, self.finish[v])

    def gain_producer(self, u, v, d, allowed) -> float:
        """How much earlier v has all its inputs if u's group moves to v's device d."""
        g = self.group[u]
        others = [self.arrival[self.pred_eid[p]] for p in range(self.pred_ptr[v], self.pred_ptr[v + 1])
                  if self.group[self.pred_src[p]] != g]
        return self.start[v] - max([self.moved_finish(u, d, allowed, self.start[v])] + others)

    def moved_finish(self, x, d, allowed, deadline) -> float:
        """x's finish on device d; inf if not allowed, if it would not finish
        before `deadline`, or if it would delay a consumer."""
        g = self.group[x]
        if not allowed[g, d]:
            return np.inf
        ready = 0.0
        for p in range(self.pred_ptr[x], self.pred_ptr[x + 1]):
            u = self.pred_src[p]
            ready = max(ready, self.finish[u] + self._cost(u, g, d, self.nbytes[self.pred_eid[p]], True))
        end = self._busy[d].first_gap(ready, self.comp[x], deadline) + self.comp[x]
        for e in range(self.succ_ptr[x], self.succ_ptr[x + 1]):
            s = self.dst[e]
            if end + self._cost(s, g, d, self.nbytes[e], False) > self.start[s]:
                return np.inf
        return end

    def _cost(self, y, g, d, nbytes, incoming) -> float:
        """Transfer time between y and a node of group g moved to device d."""
        dy = d if self.group[y] == g else self.dev[y]
        if dy == d:
            return 0.0
        a, b = (dy, d) if incoming else (d, dy)
        return self.lat[a][b] + nbytes * self.inv[a][b]

    def _last_input(self, v):
        """(edge id of v's last input to arrive, its arrival), (-1, 0.0) if none."""
        best, edge = 0.0, -1
        for p in range(self.pred_ptr[v], self.pred_ptr[v + 1]):
            e = self.pred_eid[p]
            if edge < 0 or self.arrival[e] > best:
                best, edge = self.arrival[e], e
        return edge, best

    def _op_before(self, v) -> int:
        """The op whose end freed v's device when v started (-1 if none)."""
        return self._busy[self.dev[v]].ending_at(self.start[v])


class _Busy:
    """One device's busy intervals (ops with positive compute time), by start."""

    def __init__(self, nodes, start, finish, gap_kernel):
        order = np.lexsort((nodes, start))
        self.nodes, self.start, self.finish = nodes[order], start[order], finish[order]
        self._first_gap = gap_kernel

    def ending_at(self, t) -> int:
        i = int(np.searchsorted(self.start, t, side="left")) - 1
        return int(self.nodes[i]) if i >= 0 and self.finish[i] == t else -1

    def first_gap(self, t, length, deadline) -> float:
        """Earliest time >= t at which the device is idle for `length` and done by
        `deadline`; inf if there is none."""
        return self._first_gap(self.start, self.finish, float(t), float(length), float(deadline))


@kernel
def _first_gap(start, finish, t, length, deadline):
    """Busy.first_gap on the sorted busy intervals, a kernel: refinement asks it once per
    candidate move, tens of thousands of times per round on large graphs."""
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


def _busy_intervals(graph, device, schedule, k) -> list:
    run = graph.comp_us > 0
    gap_kernel = _first_gap.for_size(graph.num_nodes)
    out = []
    for d in range(k):
        nodes = np.flatnonzero(run & (device == d))
        out.append(_Busy(nodes, schedule.start[nodes], schedule.finish[nodes], gap_kernel))
    return out

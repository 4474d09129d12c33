"""One round of overflow repair between two emulations (thesis §4.1.2, "Addressing
Overflow"): on every overflowing device, cover each overflow with the greedy two-heap
min-knapsack and move the chosen colocation groups to devices that can absorb them.

Re-emulating after every move would cost O(V + E) per move (the thesis' O(V^2)), so a
round works on the memory timelines of one emulation and updates them approximately as
it moves groups (pardnn.repair.footprint says what a move frees and needs, and
pardnn.repair.rangemax keeps the levels): subtract what a group frees on its device,
add what it needs on the target, then take the device's new highest point. The caller
re-emulates once per round.

Departure from the thesis: it walks the graph from the sink and covers overflows as it
meets them. Here devices are repaired in decreasing order of relative overflow, and on a
device the highest point of its (updated) timeline is covered first, so one knapsack can
lower a whole plateau (docs/repair.md, "Departures").

Choices the thesis leaves open:
- The target: among the devices the group's pins allow, those whose timeline can take
  the group's need without passing their capacity at any point ("only to a device whose
  emulated memory can absorb it"); of those, the fastest (on a cluster with the host as
  a device, a GPU before the host), then the one the group communicates with most,
  then the one with the least compute time, then the lowest index. Communication
  first makes a run of moved groups (a slice of the critical path leaving a full
  device) land together, so its edges stay local; weighing communication against
  compute time instead scattered such runs over the least busy devices, one transfer
  per op (measured in docs/repair.md).
- A candidate no device can absorb is dropped for the rest of the round, as the thesis
  drops it ("the node is not considered again"); it may be tried again after the next
  emulation. A group moved in any round never moves again.
- When the potentials at a point cannot cover its overflow (buffers there are still
  read later by another group, so no single group frees them: see
  pardnn.repair.chains), the groups blocking those buffers are credited with them,
  as the thesis' M_pot credits a buffer to its last consumer, and moved by the same
  knapsack; the buffers' next readers can then free them. Without this, a step whose
  activations are read in both passes would take one emulation per reader.
"""

from __future__ import annotations

import numpy as np

from pardnn.base.compiled import INTERPRETED_BELOW
from pardnn.repair.footprint import Footprints, distinct, sum_by_key
from pardnn.repair.knapsack import orders
from pardnn.repair.move import Needs, Neighbours, Round, Rows, Timelines, cover
from pardnn.repair.rangemax import BLOCK, RangeMax


class RepairRound:
    """Moves chosen in one round: `moves` (group, target) pairs; `stuck` holds
    (device, time_us, overflow_bytes, group, bytes) for each device whose overflow
    nothing could cover, with the group that holds the most bytes there and how many."""

    def __init__(self, graph, cluster, links, allowed, device, schedule, profile, frozen):
        self.graph, self.links, self.allowed = graph, links, allowed
        self.k = cluster.num_devices
        self.cap = cluster.capacity
        self.tier = cluster.tiers
        self.node_dev = np.array(device, np.int64)
        self.group_dev = self.node_dev[graph.group_nodes[graph.group_ptr[:-1]]]
        self.cost = links.move_cost(self.group_dev, self.node_dev)
        self.times, at = _grid(profile.times)
        self.cover = cover.for_size(graph.num_nodes)
        self.fp = Footprints(graph, profile, self.k, self.times, profile.peak_bytes > self.cap, links.reads)
        n = len(self.times)
        self.tl = _timelines(profile, at, n, graph.num_nodes)
        self.peak = profile.peak_bytes
        self.busy = np.array(schedule.busy_us, float)
        self.taken = np.array(frozen, bool)
        self.moves, self.stuck = [], []
        self.copied = np.zeros((self.k, len(profile.buf_bytes)), bool)     # buffers this round copied there
        self.gone = np.zeros(graph.num_groups, bool)    # groups moved this round
        self.kernel_args = _kernel_args(self, graph, links)

    def run(self):
        over = (self.peak - self.cap) / np.maximum(self.cap, 1)
        for d in np.lexsort((np.arange(self.k), -over)):
            if over[d] > 0:
                self._drain(int(d))
        return self

    def _drain(self, d):
        """Cover device d's highest point until its timeline fits, or it is stuck."""
        rows = self.fp.on_device(d)
        resident = np.flatnonzero((self.group_dev == d) & (self.links.resident > 0))
        while True:
            i, level = self.tl.argmax(d)
            overflow = level - int(self.cap[d])
            if overflow <= 0:
                return
            if not self._cover(d, i, overflow, rows, resident):
                self.stuck.append((d, float(self.times[i]), overflow, *self._holder(i, rows, resident)))
                return

    def _cover(self, d, i, overflow, rows, resident):
        """Move groups whose potentials at segment i of device d add up to `overflow`;
        False when nothing could move. If they fall short, move the groups that block a
        buffer's chain there (see `_blockers`): the next pass can then free it."""
        overflow, moved = self._knapsack(d, *self._potentials(i, rows, resident), overflow)
        if overflow > 0:
            moved |= self._knapsack(d, *self._blockers(i, rows), overflow)[1]
        return moved

    def _knapsack(self, d, cand, pot, overflow):
        """Pop candidates off the two heaps and move them until `overflow` is covered
        (pardnn.repair.move's `cover`); (overflow left, whether anything moved)."""
        moves = np.empty((len(cand), 2), np.int64)
        cand, pot = np.asarray(cand, np.int64), np.asarray(pot, np.int64)
        left, done = self.cover(d, int(overflow), cand, pot, self.cost[cand].astype(float), *orders(self.cost[cand], pot),
                                self.taken, self.allowed, self.links.resident, moves, *self.kernel_args)
        self.moves.extend(map(tuple, moves[:done].tolist()))
        return int(left), done > 0

    def _potentials(self, i, rows, resident):
        """(groups, bytes) that leaving the device would free at segment i."""
        fp = self.fp
        rows = rows[fp.active[rows] & (fp.i0[rows] <= i) & (i < fp.i1[rows])]
        groups = np.concatenate([fp.group[rows], resident])
        freed = np.concatenate([fp.bytes[rows], self.links.resident[resident]])
        keep = ~self.taken[groups]
        cand, pot = sum_by_key(groups[keep], freed[keep])
        return cand[pot > 0], pot[pot > 0]

    def _holder(self, i, rows, resident):
        """(group, bytes): the group holding the most at segment i of the device (its
        resident state and the buffers of its rows there, whether or not its leaving
        would free them now); when that alone passes the capacity, no move can help."""
        fp = self.fp
        rows = rows[(fp.i0[rows] <= i) & (i < fp.i1[rows]) & (fp.bytes[rows] > 0)]
        rows, resident = rows[~self.gone[fp.group[rows]]], resident[~self.gone[resident]]
        groups, held = sum_by_key(np.concatenate([fp.group[rows], resident]),
                                  np.concatenate([fp.bytes[rows], self.links.resident[resident]]))
        if len(groups) == 0:
            return -1, 0
        j = int(np.argmax(held))
        return int(groups[j]), int(held[j])

    def _blockers(self, i, rows):
        """(groups, bytes): buffers live at segment i that no group here can free alone,
        because a later reader still needs them, credited to that reader's group, as the
        thesis' M_pot credits a buffer to its last consumer."""
        fp = self.fp
        blocked = rows[~fp.active[rows] & (fp.i0[rows] <= i) & (i < fp.i1[rows])]
        groups, credit = [], []
        for r in blocked.tolist():
            h = fp.prev[r]
            while h >= 0 and not fp.active[h]:
                h = fp.prev[h]
            if h >= 0 and not self.taken[fp.group[h]]:
                groups.append(fp.group[h])
                credit.append(fp.bytes[r])
        cand, pot = sum_by_key(np.array(groups, np.int64), np.array(credit, np.int64))
        return cand[pot > 0], pot[pot > 0]


def _kernel_args(round_, graph, links) -> tuple:
    """cover's arrays, by name (pardnn.repair.move): the same arrays the round
    edits, so the kernel's edits are the round's."""
    fp, tl = round_.fp, round_.tl
    return (Neighbours(links.ptr, links.nbr, links.ecost, links.comp),
            Timelines(tl.vals, tl.lazy, tl.bmax, tl.n, BLOCK, round_.times),
            Needs(fp.need_ptr, fp.need_lo, fp.need_hi, fp.need_bytes, fp.need_prod, fp.need_buf, fp.need_ready),
            Rows(fp.ptr, fp.i0, fp.i1, fp.bytes, fp.active, fp.next, fp.group),
            Round(round_.node_dev, round_.busy, round_.cap, round_.copied, round_.gone,
                  graph.group_ptr, graph.group_nodes, round_.tier))


def _grid(times):
    """(grid, at): the event times of all devices, sorted and distinct, one grid for
    every device, so what a move adds to a device keeps its timing even where that
    device had no event of its own; and each event's position on the grid. (Each
    device's events come sorted, so numpy's stable sort merges a few runs.)"""
    order = np.argsort(times, kind="stable")
    ordered = times[order]
    first = distinct(ordered)
    at = np.empty(len(times), np.int64)
    at[order] = np.cumsum(first) - 1
    return ordered[first], at


def _timelines(profile, at, size, nodes) -> RangeMax:
    """Every device's memory level on each of the grid's `size` segments (`_on_grid`),
    as the rows of a RangeMax: filled by its kernel on graphs of INTERPRETED_BELOW
    `nodes` or more, from numpy's rows on smaller ones (the same levels)."""
    k = len(profile.time_ptr) - 1
    if nodes < INTERPRETED_BELOW:
        return RangeMax((_on_grid(profile, d, at, size) for d in range(k)), k, size)
    return RangeMax.of_steps(profile.time_ptr, profile.levels, at, size)


def _on_grid(profile, d, at, size):
    """Device d's memory level on each of the grid's `size` segments: the level of the
    latest of d's events at or before the segment's start (its first event's before
    any). `at` places each event on the grid: d's distinct event times are grid points,
    so each event's level holds from its own point to the next event's."""
    lo, hi = profile.time_ptr[d], profile.time_ptr[d + 1]
    starts = at[lo:hi].copy()
    starts[0] = 0
    return np.repeat(profile.levels[lo:hi], np.diff(np.append(starts, size)))

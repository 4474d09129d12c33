"""A complete search for the memory repair on small graphs: when the greedy rounds
(pardnn.repair.repair_round) get stuck, try the placements of the colocation groups one
by one, judged by the emulator (whose peaks the judge lends), until one fits, every
one has been tried, or the work limit is spent.

Depth-first over the groups, largest memory need first; each group tries the device it
is on first, then the others by index, so placements near the stuck one come first. A
group that may use one device only (on one device: every group) is placed before the
search and is no level of it, so the depth is that of the groups with a choice.
Two rules cut the tree without losing a fitting placement:
- a bound that holds whatever the schedule: a device holds the resident state of every
  group on it all step, and when one of its ops starts, that op's working set besides
  (pardnn.repair.working_sets.op_needs: what it holds beyond resident state); a partial placement whose bound already
  exceeds a device's capacity is dropped with everything below it;
- when the devices are interchangeable (same capacity, kind and links, no pins), the
  emulator's answer does not depend on their names, so of the devices no group uses yet
  only the first is tried.
The limit counts work (nodes and edges emulated, partial placements checked), not
time, so the answer is the same on every machine. Within it the search is complete:
when it ends without a fit, no placement fits, and the least overflow it met is a
bound it can show, kept per graph and cluster so that another start (the next
candidate of `--algorithm pardnn`) does not search again. Graphs with more than
MAX_PLACEMENTS placements (after the symmetry above) are not searched: the limit would
end it among the placements next to the stuck one, so the repair of large graphs
costs what it did before.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from pardnn.repair.working_sets import group_resident, op_needs

WORK_LIMIT = 1_000_000      # nodes + edges emulated, plus one per partial placement checked
MAX_PLACEMENTS = 1_000_000  # larger spaces are not searched: the limit would stop it near the start


@dataclass(frozen=True, eq=False)
class Search:
    """The outcome: a fitting group placement, or the proof (or not) that none exists."""

    group_device: object        # int per group, or None when none was found
    complete: bool              # every placement was emulated or ruled out by the bound
    emulated: int               # placements emulated
    least_overflow: int         # none found, complete: every placement overflows a device by >= this


def search(graph, cluster, group_device, allowed, peaks, limit=None) -> Search:
    """Look for a placement of the groups that fits every device's capacity, starting
    near `group_device` (int per group); `allowed` is groups x devices (pins); `peaks`
    gives the emulated peak per device of a placement (int per node); `limit` is the
    work allowed (None: WORK_LIMIT)."""
    if _too_many(cluster, allowed):
        return Search(None, False, 0, 0)
    key = (cluster.capacity.tobytes(), cluster.latency_us.tobytes(), cluster.bandwidth.tobytes(),
           np.packbits(allowed).tobytes())
    proofs = graph.memoized("exhaustive search proofs", dict)  # cluster key -> a complete Search that found nothing
    if key in proofs:                   # none fits, whatever the start: proved once already
        return proofs[key]
    found = _Search(graph, cluster, np.asarray(group_device, np.int64), allowed, peaks,
                    WORK_LIMIT if limit is None else limit).run()
    if found.complete and found.group_device is None:
        proofs[key] = found
    return found


def _too_many(cluster, allowed) -> bool:
    """More than MAX_PLACEMENTS placements of the groups to tell apart: the product of each
    group's allowed devices, over K! when the devices are interchangeable."""
    most = MAX_PLACEMENTS * (math.factorial(cluster.num_devices) if _interchangeable(cluster, allowed) else 1)
    count = 1
    for n in allowed.sum(axis=1).tolist():
        count *= n
        if count > most:
            return True
    return False


class _Search:
    def __init__(self, graph, cluster, start, allowed, peaks, limit):
        self.graph, self.cluster, self.cap = graph, cluster, cluster.capacity.astype(np.int64)
        self.peaks = peaks
        k = cluster.num_devices
        res = group_resident(graph)
        extra = np.zeros(graph.num_groups, np.int64)       # an op's working set beyond resident state
        np.maximum.at(extra, graph.group, op_needs(graph, res)[0])
        self.res, self.extra = res.tolist(), extra.tolist()
        self.choices = [[int(start[g])] + [d for d in range(k) if d != start[g]] for g in range(graph.num_groups)]
        self.choices = [[d for d in ch if allowed[g, d]] for g, ch in enumerate(self.choices)]
        self.symmetric = _interchangeable(cluster, allowed)
        self.emulation_cost = graph.num_nodes + graph.num_edges + 1
        self.work, self.limit, self.emulated = 0, limit, 0
        self.least = None
        self.dev = np.zeros(graph.num_groups, np.int64)
        self.held, self.peak_extra = [0] * k, [0] * k
        # A group with one device it may use is placed there before the search, which
        # then descends only through groups with a choice (at most log2 MAX_PLACEMENTS
        # of them), however many groups are fixed (one device: every group).
        self.used, self.fixed_over = 0, 0
        for g in range(graph.num_groups):
            if len(self.choices[g]) == 1:
                d = self.choices[g][0]
                self.dev[g], self.used = d, self.used | 1 << d
                self.held[d] += self.res[g]
                self.peak_extra[d] = max(self.peak_extra[d], self.extra[g])
        for d in range(k):
            self.fixed_over = max(self.fixed_over, self.held[d] + self.peak_extra[d] - int(self.cap[d]))
        self.order = sorted((g for g in range(graph.num_groups) if len(self.choices[g]) > 1),
                            key=lambda g: (-(res[g] + extra[g]), g))

    def run(self) -> Search:
        if self.fixed_over > 0:                 # the fixed groups alone overflow a device
            self._note(self.fixed_over)
            return Search(None, True, 0, int(self.least))
        found = self._descend(0, self.used)
        complete = found or self.work <= self.limit
        return Search(self.dev.copy() if found else None, bool(complete), self.emulated,
                      int(self.least) if self.least is not None and not found else 0)

    def _descend(self, depth, used) -> bool:
        """Place the groups from self.order[depth] on; `used`: bit mask of devices holding a group."""
        if depth == len(self.order):
            return self._fits()
        g = self.order[depth]
        fresh_tried = False
        for d in self.choices[g]:
            fresh = not used >> d & 1
            if self.symmetric and fresh and fresh_tried:
                continue
            fresh_tried |= fresh
            self.work += 1
            if self.work > self.limit:
                return False
            over = self.held[d] + self.res[g] + max(self.peak_extra[d], self.extra[g]) - int(self.cap[d])
            if over > 0:
                self._note(over)
                continue
            saved = self.peak_extra[d]
            self.held[d] += self.res[g]
            self.peak_extra[d] = max(saved, self.extra[g])
            self.dev[g] = d
            found = self._descend(depth + 1, used | 1 << d)
            self.held[d] -= self.res[g]
            self.peak_extra[d] = saved
            if found or self.work > self.limit:
                return found
        return False

    def _fits(self) -> bool:
        self.work += self.emulation_cost
        if self.work > self.limit:
            return False
        self.emulated += 1
        peak = self.peaks(self.dev[self.graph.group])
        over = int((peak - self.cap).max(initial=0))
        if over <= 0:
            return True
        self._note(over)
        return False

    def _note(self, over):
        self.least = over if self.least is None else min(self.least, over)


def _interchangeable(cluster, allowed) -> bool:
    """Renaming devices changes nothing: one capacity, one kind, one link, no pins."""
    k = cluster.num_devices
    off = ~np.eye(k, dtype=bool)
    return (bool(allowed.all()) and len(set(cluster.capacity.tolist())) == 1
            and len({d.kind for d in cluster.devices}) == 1
            and len(set(cluster.latency_us[off].tolist())) <= 1 and len(set(cluster.bandwidth[off].tolist())) <= 1)

"""The greedy 0-1 min-knapsack of thesis §4.1.2 ("Addressing Overflow", Eq. 4.4): pick
candidates whose memory potentials a_j add up to at least the overflow O at least total
move cost c_j.

The thesis keeps two heaps: `nodes_heap`, keyed by move_cost / M_pot (cost per byte
freed; the text also calls move_cost alone its key, and we take the ratio, docs/repair.md
"Departures"), and a second heap of the candidates whose potential alone covers the overflow,
keyed by move_cost. Each selection takes the top of both, keeps the one with the smaller
move_cost and returns the other to its heap. The ratio heap alone would pick many cheap
small nodes where one slightly dearer node would do; the second heap catches that.

All candidates of one overflow are known before the first pop, so the ratio heap is the
candidates sorted once (ties by candidate index, so the result is deterministic). The
overflow left only shrinks, so candidates join the covering heap (heapq, lazy deletion)
in decreasing order of potential and never leave it early: O(log C) per pop, the
thesis' logarithmic pick. (The extracted Eq. 4.4 reads "sum a_j x_j <= O"; a
min-knapsack that must cover the overflow needs ">=", which the text around it
describes and which we solve.)

A repair round pops thousands of candidates per knapsack, each followed by a move,
so it pops and moves in one kernel (pardnn.repair.move's `cover`, on the `orders`
below, with its covering heap in two arrays); `TwoHeaps` is the rule written plainly,
with heapq, and tests/test_repair_parts.py checks that the kernel pops as it does.
"""

from __future__ import annotations

import heapq

import numpy as np


def orders(cost, pot) -> tuple:
    """(by_ratio, by_pot): candidates j (move cost `cost[j]`, potential `pot[j]` > 0)
    by cost per byte freed, and by potential, most first; ties by index."""
    cost, pot = np.asarray(cost, float), np.asarray(pot, np.int64)
    idx = np.arange(len(cost))
    return np.lexsort((idx, cost / pot)), np.lexsort((idx, -pot))


class TwoHeaps:
    """Candidates j with move cost `cost[j]` and potential `pot[j]` > 0, popped greedily."""

    def __init__(self, cost, pot):
        self.cost = np.asarray(cost, float)
        pot = np.asarray(pot, np.int64)
        self.by_ratio, self.by_pot = orders(self.cost, pot)
        self.neg_pot = -pot[self.by_pot]            # ascending
        self.left = np.ones(len(self.cost), bool)
        self.covers = []            # heap of (cost, j) over candidates with pot >= overflow
        self.head = self.joined = 0

    def pop(self, overflow: int) -> int:
        """The next candidate for an overflow of `overflow` bytes, or -1 when none is left.

        `overflow` must not grow between pops. A popped candidate leaves both heaps,
        whether or not the caller can move it."""
        by_ratio, left = self.by_ratio, self.left
        while self.head < len(by_ratio) and not left[by_ratio[self.head]]:
            self.head += 1
        if self.head == len(by_ratio):
            return -1
        self._join(overflow)
        covers = self.covers
        while covers and not left[covers[0][1]]:
            heapq.heappop(covers)
        best = int(by_ratio[self.head])
        if covers and covers[0][0] <= self.cost[best]:
            best = covers[0][1]
        left[best] = False
        return best

    def _join(self, overflow):
        """Add the candidates whose potential now covers `overflow` to the covering heap."""
        end = int(np.searchsorted(self.neg_pot, -overflow, side="right"))
        if end <= self.joined:
            return
        js = self.by_pot[self.joined:end]
        js = js[self.left[js]]
        new = list(zip(self.cost[js].tolist(), js.tolist()))
        self.joined = end
        if len(new) > len(self.covers):
            self.covers.extend(new)
            heapq.heapify(self.covers)
        else:
            for item in new:
                heapq.heappush(self.covers, item)

"""The greedy 0-1 min-knapsack of thesis §4.1.2 ("Addressing Overflow", Eq. 4.4): pick
candidates whose memory potentials a_j add up to at least the overflow O at least total
move cost c_j.

The thesis keeps two heaps: `nodes_heap`, keyed by move_cost / M_pot (cost per byte
freed), and a second heap of the candidates whose potential alone covers the overflow,
keyed by move_cost. Each selection takes the top of both, keeps the one with the smaller
move_cost and returns the other to its heap. The ratio heap alone would pick many cheap
small nodes where one slightly dearer node would do; the second heap catches that.

All candidates of one overflow are known before the first pop, so a heap is just the
candidates in key order: `TwoHeaps` sorts them once (ties by candidate index, so the
result is deterministic) and walks that order. The second heap's membership grows as
the overflow left to cover shrinks, so its top is found by one vectorised scan per pop.
(The extracted Eq. 4.4 reads "sum a_j x_j <= O"; a min-knapsack that must cover the
overflow needs ">=", which is what the text around it describes and what we solve.)
"""

from __future__ import annotations

import numpy as np


class TwoHeaps:
    """Candidates j with move cost `cost[j]` and potential `pot[j]` > 0, popped greedily."""

    def __init__(self, cost, pot):
        self.cost = np.asarray(cost, float)
        self.pot = np.asarray(pot, np.int64)
        idx = np.arange(len(self.cost))
        self.by_ratio = np.lexsort((idx, self.cost / self.pot))
        self.by_cost = np.lexsort((idx, self.cost))
        self.left = np.ones(len(self.cost), bool)
        self.head = 0

    def pop(self, overflow: int) -> int:
        """The next candidate for an overflow of `overflow` bytes, or -1 when none is left.

        A popped candidate leaves both heaps, whether or not the caller can move it."""
        while self.head < len(self.by_ratio) and not self.left[self.by_ratio[self.head]]:
            self.head += 1
        if self.head == len(self.by_ratio):
            return -1
        best = int(self.by_ratio[self.head])
        covers = self.left[self.by_cost] & (self.pot[self.by_cost] >= overflow)
        if covers.any():
            whole = int(self.by_cost[np.argmax(covers)])
            if self.cost[whole] <= self.cost[best]:
                best = whole
        self.left[best] = False
        return best

"""Hand-written ordered structures against sortedcontainers / heapq: speed and identical
results (docs/data-structures.md).

    python -m tools.bench_structures [--sizes C,C,...]

The two-heap greedy min-knapsack of the repair (pardnn.repair.knapsack), popped until a
large overflow is covered, for C candidates; three versions: a numpy scan per pop,
heapq, and sortedcontainers.SortedList.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np
from sortedcontainers import SortedList
from tools.commit_line import print_commit



class ScanHeaps:
    """The former pardnn.repair.knapsack.TwoHeaps: the covering heap's top found by a
    numpy scan over all candidates per pop (O(C) per pop)."""

    def __init__(self, cost, pot):
        self.cost = np.asarray(cost, float)
        self.pot = np.asarray(pot, np.int64)
        idx = np.arange(len(self.cost))
        self.by_ratio = np.lexsort((idx, self.cost / self.pot))
        self.by_cost = np.lexsort((idx, self.cost))
        self.left = np.ones(len(self.cost), bool)
        self.head = 0

    def pop(self, overflow: int) -> int:
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


class SortedHeaps:
    """The covering heap as a SortedList of (cost, index), entries removed when popped."""

    def __init__(self, cost, pot):
        self.cost = np.asarray(cost, float).tolist()
        self.pot = np.asarray(pot, np.int64).tolist()
        idx = np.arange(len(self.cost))
        self.by_ratio = np.lexsort((idx, np.divide(self.cost, self.pot))).tolist()
        self.by_pot = np.lexsort((idx, -np.asarray(self.pot))).tolist()
        self.left = [True] * len(self.cost)
        self.covers = SortedList()
        self.head = self.added = 0

    def pop(self, overflow: int) -> int:
        by_ratio, left = self.by_ratio, self.left
        while self.head < len(by_ratio) and not left[by_ratio[self.head]]:
            self.head += 1
        if self.head == len(by_ratio):
            return -1
        while self.added < len(self.by_pot) and self.pot[self.by_pot[self.added]] >= overflow:
            j = self.by_pot[self.added]
            if left[j]:
                self.covers.add((self.cost[j], j))
            self.added += 1
        best = by_ratio[self.head]
        if self.covers and self.covers[0][0] <= self.cost[best]:
            best = self.covers[0][1]
        left[best] = False
        self.covers.discard((self.cost[best], best))
        return best


def _pops(heaps, overflow, pot):
    out = []
    while overflow > 0 and (j := heaps.pop(overflow)) >= 0:
        out.append(j)
        overflow -= int(pot[j])
    return out


def bench_knapsack(sizes, repeat=3):
    from pardnn.repair.knapsack import TwoHeaps
    versions = [("numpy scan", ScanHeaps), ("heapq", TwoHeaps), ("SortedList", SortedHeaps)]
    print(f"knapsack: C candidates, overflow = a share of their bytes; best of {repeat}, "
          "ms per knapsack (its pops), all built from scratch")
    for c, share in [(c, s) for s in (0.01, 0.6) for c in sizes]:
        rng = np.random.default_rng(c)
        cost = np.round(rng.lognormal(3, 1.5, c), 1)       # ties happen, as with real costs
        pot = rng.integers(1, 1 << 20, c)
        overflow = int(share * pot.sum())
        row, ref = [], None
        for name, cls in versions:
            best = float("inf")
            for _ in range(repeat):
                t = time.perf_counter()
                got = _pops(cls(cost, pot), overflow, pot)
                best = min(best, time.perf_counter() - t)
            ref = got if ref is None else ref
            same = "same" if got == ref else "DIFFERENT"
            row.append(f"{name} {best * 1e3:8.2f} ({same})")
        print(f"  C = {c:>6}, {share:4.0%} ({len(ref):>5} pops): " + " | ".join(row), flush=True)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="100,1000,10000,50000")
    args = p.parse_args(argv)
    print_commit()
    bench_knapsack([int(x) for x in args.sizes.split(",")])
    return 0


if __name__ == "__main__":
    sys.exit(main())

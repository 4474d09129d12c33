"""Hand-written ordered structures against sortedcontainers / heapq: speed and identical
results (docs/architecture.md, "Data structures").

    python tools/bench_structures.py [knapsack|heft|all] [--nodes N] [--devices K]

knapsack: the two-heap greedy min-knapsack of the repair (pardnn.repair.knapsack),
          popped until a large overflow is covered, for C candidates; three versions:
          a numpy scan per pop, heapq, and sortedcontainers.SortedList.
heft:     HEFT's insertion slots (pardnn.placers.baselines.heft._Timeline, blocks of
          gaps with each block's widest) against a SortedList of gaps scanned from the
          ready time, on a synthetic graph; placements must be identical.
"""

from __future__ import annotations

import argparse
import heapq
import os
import sys
import time

import numpy as np
from sortedcontainers import SortedList
from commit_line import print_commit  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


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


class SortedTimeline:
    """HEFT's idle gaps as a SortedList of (start, end), scanned from the gap holding
    the ready time until one is long enough."""

    def __init__(self):
        self.gaps = SortedList()
        self.tail = 0.0

    def earliest(self, ready, length) -> float:
        if ready < self.tail:
            first = max(self.gaps.bisect_right((ready, float("inf"))) - 1, 0)
            for gs, ge in self.gaps.islice(first):
                if ge - max(gs, ready) >= length:
                    return max(gs, ready)
        return max(ready, self.tail)

    def add(self, s, f):
        if s >= self.tail:
            if s > self.tail:
                self.gaps.add((self.tail, s))
            self.tail = f
            return
        gaps = self.gaps
        gs, ge = gaps[gaps.bisect_right((s, float("inf"))) - 1]
        gaps.remove((gs, ge))
        for gap in ((gs, s), (f, ge)):
            if gap[1] > gap[0]:
                gaps.add(gap)


def bench_heft(nodes, devices):
    from synth_graph import synth_graph
    from pardnn.hardware import parse_devices
    from pardnn.placers.baselines import heft
    graph = synth_graph(nodes, seed=0)
    cluster = parse_devices(f"dgx2:{devices}")
    print(f"heft: synthetic graph of {graph.num_nodes} nodes, {devices} devices; seconds per placement")
    out = {}
    original = heft._Timeline
    for name, cls in (("blocks (heft._Timeline)", original), ("SortedList", SortedTimeline)):
        heft._Timeline = cls
        try:
            t = time.perf_counter()
            out[name] = heft.place(graph, cluster)
            print(f"  {name}: {time.perf_counter() - t:.2f} s", flush=True)
        finally:
            heft._Timeline = original
    a, b = out.values()
    print(f"  placements identical: {bool(np.array_equal(a, b))}")
    narrow_gaps(original)


def narrow_gaps(blocks, gaps=20_000, queries=2_000):
    """The case the blocks are for: many idle gaps too short for the node, so a
    query must pass them all to reach the first wide one."""
    print(f"  {gaps} gaps of 1 us, then {queries} queries for a 2 us slot from time 0:")
    for name, cls in (("blocks (heft._Timeline)", blocks), ("SortedList", SortedTimeline)):
        tl = cls()
        for i in range(gaps):
            tl.add(3.0 * i + 1, 3.0 * i + 3)        # busy [3i+1, 3i+3): gaps [3i, 3i+1)
        t = time.perf_counter()
        got = [tl.earliest(0.0, 2.0) for _ in range(queries)]
        print(f"    {name}: {(time.perf_counter() - t) / queries * 1e6:.1f} us per query "
              f"(slot at {got[0]:.0f})", flush=True)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("part", nargs="?", default="all", choices=["all", "knapsack", "heft"])
    p.add_argument("--sizes", default="100,1000,10000,50000")
    p.add_argument("--nodes", type=int, default=20_000)
    p.add_argument("--devices", type=int, default=8)
    args = p.parse_args(argv)
    print_commit()
    if args.part in ("all", "knapsack"):
        bench_knapsack([int(x) for x in args.sizes.split(",")])
    if args.part in ("all", "heft"):
        bench_heft(args.nodes, args.devices)
    return 0


if __name__ == "__main__":
    sys.exit(main())

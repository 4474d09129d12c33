"""Benchmark of the memory repair at exact capacity (issue 28): does every placer, with
the repair, fit a small graph whenever some placement fits?

    python -m tools.bench_exact_fit [--cases 1000] [--seed 0] [--algorithms pardnn,etf] [--csv FILE]

Each case is a random graph of 3-12 nodes on 2 or 3 devices (cpu:K, 1 us + bytes /
(1 MB/us) links, no reserve), with random colocation groups and resident state. The
oracle tries every placement of its groups with the emulator (the first group on
device 0: the devices are interchangeable). Two capacities per case:
- exact: the highest per-device peak of one random placement (so that one fits, exactly);
- tightest: the least highest peak over all placements (only the best ones fit).
For each algorithm, `pardnn.pipeline.place.place` runs it with the repair; a case counts
as fitted when it returns a placement whose every peak is within capacity. Prints the
fitted counts per algorithm and capacity; --csv writes them too, under a first line
naming the commit (docs/repair_exact_fit.csv is that file for the table in docs/repair.md).
"""

from __future__ import annotations

import argparse
import csv
import itertools
import sys
import time

import numpy as np


from pardnn.emulator.memory import track_memory
from pardnn.emulator.scheduler import simulate
from pardnn.base.errors import UserError
from pardnn.graph import CostGraph
from pardnn.hardware import parse_devices
from pardnn.pipeline import place as placer
from pardnn.placers import registry
from tools.commit_line import csv_comment, print_commit


def cluster(k, capacity):
    return parse_devices(f"cpu:{k}").with_options(memory=int(capacity), reserve=0.0, latency=1.0, bandwidth=1e6)


def random_case(rng):
    """(graph, k): 3-12 nodes, random DAG edges, outputs, times, groups, resident state."""
    n = int(rng.integers(3, 13))
    pairs = rng.integers(0, n, (int(rng.integers(0, 3 * n + 1)), 2))
    edges = sorted({(int(a), int(b)) for a, b in pairs if a < b})
    out = rng.integers(0, 51, n)
    graph = CostGraph.build(names=[f"n{i}" for i in range(n)], comp_us=rng.integers(0, 6, n), out_bytes=out,
                            persist_bytes=rng.integers(0, 101, n), group=rng.integers(0, n, n),
                            edge_src=[a for a, _ in edges], edge_dst=[b for _, b in edges],
                            edge_bytes=[int(out[a]) for a, _ in edges])
    return graph, int(rng.integers(2, 4))


def highest_peak(graph, k, group_device):
    device = np.asarray(group_device, np.int64)[graph.group]
    c = cluster(k, 2**40)
    return int(track_memory(graph, c, device, simulate(graph, c, device)).peak_bytes.max())


def tightest(graph, k) -> int:
    """The least highest per-device peak over every placement of the groups."""
    best = None
    for rest in itertools.product(range(k), repeat=graph.num_groups - 1):
        peak = highest_peak(graph, k, (0, *rest))
        best = peak if best is None else min(best, peak)
    return best


def fits(graph, k, capacity, algorithm) -> bool:
    try:
        report = placer.place(graph, cluster(k, capacity), algorithm)[1].to_json()
    except UserError:
        return False
    return report["feasible"] and max(report["peak_memory_bytes"]) <= capacity


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--algorithms", default=",".join(registry.names()))
    ap.add_argument("--csv", default="")
    args = ap.parse_args(argv)
    print_commit()
    algorithms = args.algorithms.split(",")
    counts = {(a, kind): 0 for a in algorithms for kind in ("exact", "tightest")}
    start = time.perf_counter()
    for i in range(args.cases):
        rng = np.random.default_rng([args.seed, i])
        graph, k = random_case(rng)
        known = rng.integers(0, k, graph.num_groups)
        for kind, capacity in (("exact", highest_peak(graph, k, known)), ("tightest", tightest(graph, k))):
            for algorithm in algorithms:
                ok = fits(graph, k, capacity, algorithm)
                counts[algorithm, kind] += ok
        if (i + 1) % 100 == 0:
            print(f"  {i + 1} cases, {time.perf_counter() - start:.0f} s", file=sys.stderr, flush=True)
    print(f"{args.cases} random graphs (3-12 nodes, 2-3 devices), seed {args.seed}: fitted cases")
    print(f"{'algorithm':<14}{'exact':>8}{'tightest':>10}")
    for a in algorithms:
        print(f"{a:<14}{counts[a, 'exact']:>8}{counts[a, 'tightest']:>10}")
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            f.write(csv_comment())
            writer = csv.writer(f)
            writer.writerow(["algorithm", "cases", "fitted_exact", "fitted_tightest"])
            writer.writerows([a, args.cases, counts[a, "exact"], counts[a, "tightest"]] for a in algorithms)


if __name__ == "__main__":
    main()

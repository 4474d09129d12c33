"""Placement time against graph size, per algorithm (issue #7); prints measured numbers.

    python tools/bench_speed.py [--sizes 10000,50000,100000,200000] [--algorithms a,b] [--k 8] [--limit 120]

For every size, a synthetic training-like graph (tools/synth_graph.py, seed 0) is placed
on K virtual CPUs with memory unlimited, so the times are the placer's own work: the
`placer` column is the algorithm (what `--algorithm NAME` runs), `repair` the overflow
check that pardnn.pipeline.place runs after every placer (one emulation here, since nothing
overflows). Each (algorithm, size) runs in its own process; one that has not finished
within --limit seconds of placing (plus the graph build) is killed, shown as "> LIMIT s",
and not tried at larger sizes. The machine is shared, so the load average is printed
with each row: on a busy 2-core machine times are inflated.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

from pardnn.placers import registry as algorithms  # noqa: E402
from commit_line import print_commit  # noqa: E402

UNLIMITED = 2**50
BUILD_ALLOWANCE_S = 60      # building a 200k-node synthetic graph takes a few seconds


def measure(algorithm: str, nodes: int, k: int) -> dict:
    """Build the graph, run the placer and the repair once; their wall times."""
    from synth_graph import synth_graph

    from pardnn.hardware import parse_devices
    from pardnn.repair.overflow_repair import repair
    graph = synth_graph(nodes, seed=0)
    cluster = parse_devices(f"cpu:{k}").with_options(memory=UNLIMITED)
    t0 = time.perf_counter()
    device = algorithms.get(algorithm)(graph, cluster, {})
    t1 = time.perf_counter()
    repair(graph, cluster, device)
    t2 = time.perf_counter()
    return {"nodes": graph.num_nodes, "edges": graph.num_edges, "placer_s": t1 - t0, "repair_s": t2 - t1}


def run_cell(algorithm: str, nodes: int, k: int, limit: float):
    """measure() in a child process; None when it ran past the limit, {"error": last
    line of its stderr} when it failed (a broken placer is reported, not fatal)."""
    cmd = [sys.executable, __file__, "--child", algorithm, str(nodes), str(k)]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=limit + BUILD_ALLOWANCE_S)
    except subprocess.TimeoutExpired:
        return None
    if done.returncode != 0:
        return {"error": (done.stderr.strip().splitlines() or ["no message"])[-1]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="10000,50000,100000,200000")
    p.add_argument("--algorithms", default=",".join(algorithms.names()))
    p.add_argument("--k", type=int, default=8)
    p.add_argument("--limit", type=float, default=120.0, help="seconds before an algorithm is given up")
    p.add_argument("--child", nargs=3, metavar=("ALGORITHM", "NODES", "K"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        name, nodes, k = args.child
        print(json.dumps(measure(name, int(nodes), int(k))))
        return 0
    print_commit()
    sizes = [int(x) for x in args.sizes.split(",") if x]
    names = [x for x in args.algorithms.split(",") if x]
    print(f"K={args.k} virtual CPUs, memory unlimited; seconds of wall time on {os.cpu_count()} cores")
    print(f"{'algorithm':12s} {'nodes':>7s} {'edges':>7s} {'placer':>9s} {'repair':>8s}  load avg")
    given_up = set()
    for nodes in sizes:
        for name in names:
            if name in given_up:
                print(f"{name:12s} {nodes:7d} {'':7s} {'skipped':>9s}  (over {args.limit:.0f} s at a smaller size)")
                continue
            row = run_cell(name, nodes, args.k, args.limit)
            load = os.getloadavg()[0]
            if row is not None and "error" in row:
                given_up.add(name)
                print(f"{name:12s} {nodes:7d} {'':7s} {'failed':>9s}  {row['error'][:80]}")
            elif row is None:
                given_up.add(name)
                print(f"{name:12s} {nodes:7d} {'':7s} {'> ' + str(int(args.limit)) + ' s':>9s}  {'':8s}  {load:.1f}")
            else:
                print(f"{name:12s} {row['nodes']:7d} {row['edges']:7d} {row['placer_s']:9.2f} "
                      f"{row['repair_s']:8.2f}  {load:.1f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

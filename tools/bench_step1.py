"""Quality and speed of ParDNN Step 1 (`--algorithm pardnn`, issue #4); prints measured numbers.

    python -m tools.bench_step1 quality [--profile DIR ...] [--synth NODES ...] [--devices dgx2] [--k 2,4,8,16] [--interval-bound]
    python -m tools.bench_step1 speed [--nodes 200000] [--k 16] [--repeat 3]

quality: for every graph (profile dirs or cost graph JSON files, e.g. written by
`pardnn profile FAMILY --estimate dgx2 -o DIR`, and synthetic training-like graphs
from tools/synth_graph.py) and every K, the emulated makespan of round-robin, of
ParDNN before refinement (slicing + mapping) and after it, against lower_bound_us =
max(critical path without communication, total work / K). Step 1 ignores memory, so
this is the "no memory pressure" setting. Columns:
  par      total work / critical path (the graph's parallelism)
  vs_rr    round-robin makespan / ParDNN makespan (> 1: ParDNN is faster)
  vs_lb    ParDNN makespan / lower bound (1.0 is optimal)
  vs_fb    with --interval-bound: ParDNN makespan / the Fernandez-Bussell bound
           (tools/interval_bound.py), a tighter lower bound than lower_bound_us
  refine   refinement's own gain: 1 - refined / mapped makespan; "one device" marks
           results where every split was slower than one device, so refinement
           put everything there (ops too short to pay for transfers)
speed: Step 1's stage times on a synthetic graph (best of --repeat runs), with the
machine's load average, since other processes on a shared machine slow it down.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np


from tools.interval_bound import interval_bound
from tools.synth_graph import synth_graph

from pardnn.placers.round_robin import place as round_robin
from pardnn.hardware import parse_devices
from pardnn.emulator.scheduler import simulate
from pardnn.graph.levels import critical_path_us
from pardnn.emulator.trial import emulate
from pardnn.placers.step1 import partition
from tools.commit_line import print_commit


def graphs(args):
    """(label, CostGraph) for each --profile and --synth."""
    from pardnn.pipeline.load import load_cost_graph
    for path in args.profile:
        yield os.path.basename(os.path.normpath(path)), load_cost_graph(path)[0]
    for nodes in args.synth:
        yield f"synth{nodes}", synth_graph(nodes, seed=0)


def quality(args) -> int:
    ks = [int(k) for k in args.k.split(",")]
    print(f"{'graph':<22}{'nodes':>8}{'K':>4}{'par':>7}{'rr_us':>13}{'mapped_us':>13}{'pardnn_us':>13}"
          f"{'lb_us':>13}{'vs_rr':>7}{'vs_lb':>7}{'refine':>8}  note")
    rows = []
    for label, g in graphs(args):
        work, cp = g.total_work_us(), critical_path_us(g)
        for k in ks:
            cluster = parse_devices(f"{args.devices}:{k}")
            rr = simulate(g, cluster, round_robin(g, cluster)).makespan
            r = partition(g, cluster, emulate=emulate)
            lb = max(cp, work / k)
            row = (work / cp, rr / r.makespan_us, r.makespan_us / lb, 1 - r.makespan_us / r.mapped_makespan_us)
            rows.append((k, *row, r.one_device))
            note = "one device is faster than any split" if r.one_device else ""
            if args.interval_bound:
                note = f"vs_fb {r.makespan_us / interval_bound(g, k):.2f}  {note}"
            print(f"{label:<22}{g.num_nodes:>8}{k:>4}{row[0]:>7.2f}{rr:>13.1f}{r.mapped_makespan_us:>13.1f}"
                  f"{r.makespan_us:>13.1f}{lb:>13.1f}{row[1]:>7.2f}{row[2]:>7.2f}{100 * row[3]:>7.2f}%  {note}")
    summarise(rows)
    return 0


def summarise(rows):
    k, par, vs_rr, vs_lb, gain, one = (np.array(c) for c in zip(*rows))
    wide = par > k
    print(f"beats round-robin: {int((vs_rr > 1).sum())} of {len(rows)}; "
          f"geometric-mean speedup over round-robin {np.exp(np.log(vs_rr).mean()):.2f}x")
    if wide.any():
        print(f"parallelism > K: {int(wide.sum())} cases, {int((vs_lb[wide] <= 1.3).sum())} within 1.3x of the "
              f"lower bound (best {vs_lb[wide].min():.2f}x, worst {vs_lb[wide].max():.2f}x)")
    split = ~one
    if split.any():
        print(f"refinement gain where the result is split: mean {100 * gain[split].mean():.2f}%, "
              f"max {100 * gain[split].max():.2f}% ({int(split.sum())} cases)")
    print(f"one device faster than any split: {int(one.sum())} cases")


def speed(args) -> int:
    t0 = time.perf_counter()
    g = synth_graph(args.nodes, seed=0)
    print(f"synthetic graph: {g.num_nodes} nodes, {g.num_edges} edges, {g.num_groups} groups "
          f"(built in {time.perf_counter() - t0:.2f} s); K = {args.k} ({args.devices})")
    cluster = parse_devices(f"{args.devices}:{args.k}")
    best = None
    for i in range(args.repeat):
        timings = {}
        load = os.getloadavg()[0]
        t0 = time.perf_counter()
        partition(g, cluster, timings, emulate=emulate)
        total = time.perf_counter() - t0
        stages = "  ".join(f"{s} {timings[s]:.2f} s" for s in ("slicing", "mapping", "refine"))
        print(f"run {i + 1}: {stages}  total {total:.2f} s  (load average {load:.2f})")
        best = total if best is None else min(best, total)
    print(f"best total: {best:.2f} s on {os.cpu_count()} cores")
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="what", required=True)
    q = sub.add_parser("quality", help="makespans vs round-robin and the lower bound")
    q.add_argument("--profile", action="append", default=[], metavar="DIR",
                   help="profile dir or cost graph JSON (repeatable)")
    q.add_argument("--synth", action="append", type=int, default=[], metavar="NODES",
                   help="synthetic graph of about NODES nodes (repeatable)")
    q.add_argument("--devices", default="dgx2", help="device preset taking :K (default dgx2)")
    q.add_argument("--k", default="2,4,8,16", help="device counts (default 2,4,8,16)")
    q.add_argument("--interval-bound", action="store_true",
                   help="also compare with the Fernandez-Bussell bound (seconds per graph and K)")
    s = sub.add_parser("speed", help="Step 1 stage times on a large synthetic graph")
    s.add_argument("--nodes", type=int, default=200_000)
    s.add_argument("--k", type=int, default=16)
    s.add_argument("--devices", default="dgx2", help="device preset taking :K (default dgx2)")
    s.add_argument("--repeat", type=int, default=3)
    args = p.parse_args(argv)
    print_commit()
    if args.what == "quality" and not (args.profile or args.synth):
        args.synth = [20_000]
    return quality(args) if args.what == "quality" else speed(args)


if __name__ == "__main__":
    sys.exit(main())

"""Placement time against graph size, per algorithm (issues #7, #15); prints measured numbers.

    python -m tools.bench_speed [--sizes 10000,50000,100000,200000] [--algorithms a,b] [--k 8] [--limit 120] [-o OUT]
    python -m tools.bench_speed --profile DIR --devices dgx-h100:8 [--memory 8GiB] [--algorithms pardnn,etf]

With --profile, a real profile directory (or cost graph JSON) is placed instead, as
`pardnn place PROFILE --devices ... [--memory ...]` places it: the load time, the
placement time and every stage's seconds (report.json's stage_seconds; for the
pardnn portfolio each candidate's build and repair) are printed per algorithm.

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
import csv
import json
import os
import subprocess
import sys
import time


from pardnn.pipeline.portfolio import build
from pardnn.placers import registry as algorithms
from tools.commit_line import csv_comment, print_commit

HERE = os.path.dirname(os.path.abspath(__file__))

UNLIMITED = 2**50
BUILD_ALLOWANCE_S = 60      # building a 200k-node synthetic graph takes a few seconds


def measure(algorithm: str, nodes: int, k: int) -> dict:
    """Build the graph, run the placer and the repair once; their wall times."""
    from tools.synth_graph import synth_graph

    from pardnn.hardware import parse_devices
    from pardnn.pipeline.judge import judge
    graph = synth_graph(nodes, seed=0)
    cluster = parse_devices(f"cpu:{k}").with_options(memory=UNLIMITED)
    t0 = time.perf_counter()
    device = build(graph, cluster, algorithms.candidates(algorithm)[0], {})
    t1 = time.perf_counter()
    judge(graph, cluster, device)
    t2 = time.perf_counter()
    return {"nodes": graph.num_nodes, "edges": graph.num_edges, "placer_s": t1 - t0, "repair_s": t2 - t1}


def measure_profile(algorithm: str, profile: str, devices: str, memory: str) -> dict:
    """Load `profile`, place it with `algorithm` as `pardnn place` does; the seconds of each."""
    from pardnn.hardware import parse_devices
    from pardnn.pipeline import place as placer
    from pardnn.pipeline.load import load_cost_graph
    from pardnn.base.units import parse_size
    t0 = time.perf_counter()
    if os.path.isdir(profile):
        import pardnn.tf.profile_loader  # noqa: F401  (the loader's imports, timed apart from the load)
    t1 = time.perf_counter()
    graph, _ = load_cost_graph(profile)
    load_s = time.perf_counter() - t1
    cluster = parse_devices(devices)
    if memory:
        cluster = cluster.with_options(memory=parse_size(memory))
    report = placer.place(graph, cluster, algorithm)[1].to_json()
    return {"nodes": graph.num_nodes, "edges": graph.num_edges, "import_s": t1 - t0, "load_s": load_s,
            "placer_s": report["placement_seconds"], "stages": report["stage_seconds"],
            "makespan_ms": report["makespan_us"] / 1e3, "winner": report.get("candidate", "")}


def run_cell(algorithm: str, nodes, k, limit: float, profile_args=None):
    """measure() (or measure_profile() with profile_args) in a child process; None when
    it ran past the limit, {"error": last line of its stderr} when it failed (a broken
    placer is reported, not fatal)."""
    cmd = [sys.executable, __file__, "--child", algorithm, str(nodes), str(k)]
    if profile_args:
        cmd = [sys.executable, __file__, "--profile-child", algorithm, *profile_args]
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
    p.add_argument("--algorithms", help="comma-separated (default: every placer; with --profile: pardnn,etf)")
    p.add_argument("--k", type=int, default=8)
    p.add_argument("--limit", type=float, default=120.0, help="seconds before an algorithm is given up")
    p.add_argument("--profile", help="place this profile dir / cost graph JSON instead of synthetic graphs")
    p.add_argument("--devices", default="dgx-h100:8", help="with --profile: the --devices of pardnn place")
    p.add_argument("--memory", default="", help="with --profile: the --memory of pardnn place (default: the preset's)")
    p.add_argument("-o", "--out", help="also write OUT.csv, one line per cell, its first line naming the commit")
    p.add_argument("--child", nargs=3, metavar=("ALGORITHM", "NODES", "K"), help=argparse.SUPPRESS)
    p.add_argument("--profile-child", nargs=4, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        name, nodes, k = args.child
        print(json.dumps(measure(name, int(nodes), int(k))))
        return 0
    if args.profile_child:
        print(json.dumps(measure_profile(*args.profile_child)))
        return 0
    print_commit()
    if args.profile:
        return profile_rows(args)
    sizes = [int(x) for x in args.sizes.split(",") if x]
    names = [x for x in (args.algorithms or ",".join(algorithms.names())).split(",") if x]
    print(f"K={args.k} virtual CPUs, memory unlimited; seconds of wall time on {os.cpu_count()} cores")
    print(f"{'algorithm':12s} {'nodes':>7s} {'edges':>7s} {'placer':>9s} {'repair':>8s}  load avg")
    given_up, cells = set(), []
    for nodes in sizes:
        for name in names:
            if name in given_up:
                print(f"{name:12s} {nodes:7d} {'':7s} {'skipped':>9s}  (over {args.limit:.0f} s at a smaller size)")
                continue
            row = run_cell(name, nodes, args.k, args.limit)
            load = os.getloadavg()[0]
            cells.append({"algorithm": name, "size": nodes, "k": args.k, "load_avg": round(load, 2),
                          **(row or {"error": f"over {args.limit:.0f} s"})})
            if row is not None and "error" in row:
                given_up.add(name)
                print(f"{name:12s} {nodes:7d} {'':7s} {'failed':>9s}  {row['error'][:80]}")
            elif row is None:
                given_up.add(name)
                print(f"{name:12s} {nodes:7d} {'':7s} {'> ' + str(int(args.limit)) + ' s':>9s}  {'':8s}  {load:.1f}")
            else:
                print(f"{name:12s} {row['nodes']:7d} {row['edges']:7d} {row['placer_s']:9.2f} "
                      f"{row['repair_s']:8.2f}  {load:.1f}", flush=True)
    if args.out:
        write_csv(args.out + ".csv", cells)
    return 0


def write_csv(path: str, cells: list) -> None:
    """One line per (algorithm, size) cell after the commit line; written to a temporary
    file and renamed, so an interrupted run leaves no half-written CSV."""
    columns = ["algorithm", "size", "k", "nodes", "edges", "placer_s", "repair_s", "load_avg", "error"]
    with open(path + ".tmp", "w", newline="") as f:
        f.write(csv_comment())
        writer = csv.DictWriter(f, columns)
        writer.writeheader()
        writer.writerows(cells)
    os.replace(path + ".tmp", path)


def profile_rows(args) -> int:
    """--profile: one line per algorithm with load, placement and stage seconds."""
    names = [x for x in (args.algorithms or "pardnn,etf").split(",") if x]
    print(f"{args.profile} on {args.devices}, memory {args.memory or 'as the preset'}; "
          f"seconds of wall time on {os.cpu_count()} cores")
    for name in names:
        row = run_cell(name, 0, 0, args.limit, [args.profile, args.devices, args.memory])
        load = os.getloadavg()[0]
        if row is None or "error" in row:
            print(f"{name:12s} {'> ' + str(int(args.limit)) + ' s' if row is None else row['error'][:100]}")
            continue
        stages = ", ".join(f"{k} {v:.2f}" for k, v in row["stages"].items())
        print(f"{name:12s} {row['nodes']} nodes: import TF {row['import_s']:.2f} s, load {row['load_s']:.2f} s, placement {row['placer_s']:.2f} s, "
              f"makespan {row['makespan_ms']:.3f} ms{' (' + row['winner'] + ')' if row['winner'] else ''}, "
              f"load avg {load:.1f}\n{'':13s}stages: {stages}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Issue 26's goals as a user meets them: `pardnn place` wall time and peak RSS, against
`pardnn place --algorithm etf` on the same graph in the same run; prints measured numbers.

    python -m tools.bench_wall --graph /tmp/g200k.json --devices cpu:16 --bandwidth 12GB/s \
        --latency 25us --memory 1PiB,0.3x [--repeat 2] [-o docs/bench-wall]

Each row is one graph, device set and memory: the median wall seconds of `pardnn place`
(the portfolio) and of `--algorithm etf` over --repeat runs, run alternately so that the
machine's load falls on both, their ratio (goal 1: <= 1.5), the portfolio's peak RSS
(goal 2: <= 2 GB at 1M nodes), and both makespans (the portfolio's must not be longer).
A memory given as `0.3x` is that fraction of the graph's emulated single-device peak.
Each run is a fresh process (`python -m pardnn place ... -o TMP`), so the times include
Python's start, the imports, loading the graph and writing every output.
With -o, OUT.csv gets one line per run, its first line naming the commit and command.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time


from tools.commit_line import csv_comment, print_commit

HERE = os.path.dirname(os.path.abspath(__file__))

COLUMNS = ["graph", "nodes", "devices", "memory", "algorithm", "run", "wall_s", "peak_rss_mb",
           "placement_s", "makespan_us", "winner"]


def memory_bytes(graph_path: str, memory: str) -> str:
    """--memory as given, or `0.3x` turned into bytes: that fraction of the graph's
    emulated peak on one device with unlimited memory."""
    if not memory.endswith("x"):
        return memory
    import numpy as np

    from pardnn.pipeline.report import evaluate
    from pardnn.hardware import parse_devices
    from pardnn.pipeline.load import load_cost_graph
    graph, _ = load_cost_graph(graph_path)
    one = parse_devices("cpu:1").with_options(memory=2**50)
    peak = evaluate(graph, one, np.zeros(graph.num_nodes, np.int32)).peak_memory_bytes[0]
    return str(int(float(memory[:-1]) * peak))


def place_once(graph: str, args, devices: str, memory: str, algorithm: str) -> dict:
    """One `pardnn place` in a fresh process: wall seconds, peak RSS and its report."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "out")
        cmd = [sys.executable, "-m", "pardnn", "place", graph, "--devices", devices,
               "--memory", memory, "--algorithm", algorithm, "-o", out, *args.link]
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        err = proc.stderr.read()
        proc.stderr.close()
        code = os.waitstatus_to_exitcode(status)
        if code == 2 and "no placement within" in err:      # a placer + repair that cannot fit
            return {"wall_s": wall, "peak_rss_mb": usage.ru_maxrss / 1024, "placement_s": None,
                    "makespan_us": None, "winner": "no fit", "nodes": None}
        if code != 0:
            raise SystemExit(f"bench_wall: {' '.join(cmd)} failed: {err.strip().splitlines()[-1:]}")
        with open(os.path.join(out, "report.json")) as f:
            report = json.load(f)
    return {"wall_s": wall, "peak_rss_mb": usage.ru_maxrss / 1024, "placement_s": report["placement_seconds"],
            "makespan_us": report["makespan_us"], "winner": report.get("candidate", ""),
            "nodes": report["num_nodes"]}


def row(graph: str, args, devices: str, memory: str) -> list:
    """Alternate pardnn and etf --repeat times; one dict per run."""
    given = memory_bytes(graph, memory)
    runs = []
    for i in range(args.repeat):
        for algorithm in ("pardnn", "etf"):
            r = place_once(graph, args, devices, given, algorithm)
            runs.append({"graph": os.path.basename(graph.rstrip("/")), "devices": devices, "memory": memory,
                         "algorithm": algorithm, "run": i, **r})
    return runs


def summary(runs: list) -> str:
    by = {a: [r for r in runs if r["algorithm"] == a] for a in ("pardnn", "etf")}
    wall = {a: statistics.median(r["wall_s"] for r in rs) for a, rs in by.items()}
    first = runs[0]
    nodes = next((r["nodes"] for r in runs if r["nodes"]), 0)
    return (f"{first['graph']:28s} {nodes:8d} {first['devices']:9s} {first['memory']:>6s} "
            f"{wall['pardnn']:8.2f} {wall['etf']:8.2f} {wall['pardnn'] / wall['etf']:6.2f}x "
            f"{max(r['peak_rss_mb'] for r in by['pardnn']):8.0f} "
            f"{_ms(by['pardnn'][0]):>11s} {_ms(by['etf'][0]):>11s} {by['pardnn'][0]['winner']:8s} {os.getloadavg()[0]:4.1f}")


def _ms(run) -> str:
    return "no fit" if run["makespan_us"] is None else f"{run['makespan_us'] / 1e3:.3f}"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--graph", action="append", required=True, help="cost graph JSON or profile dir (repeatable)")
    p.add_argument("--devices", default="cpu:16", help="comma-separated: each a --devices of pardnn place")
    p.add_argument("--memory", default="1PiB,0.3x", help="comma-separated: sizes, or FRACTIONx of one device's peak")
    p.add_argument("--bandwidth", default="")
    p.add_argument("--latency", default="")
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("-o", "--out", help="write OUT.csv (one line per run)")
    args = p.parse_args(argv)
    args.link = [x for flag in ("bandwidth", "latency") if getattr(args, flag)
                 for x in (f"--{flag}", getattr(args, flag))]
    print_commit()
    print(f"wall seconds (median of {args.repeat}) on {os.cpu_count()} cores; peak RSS of pardnn in MB; "
          "makespans in ms")
    print(f"{'graph':28s} {'nodes':>8s} {'devices':9s} {'memory':>6s} {'pardnn':>8s} {'etf':>8s} "
          f"{'ratio':>7s} {'RSS':>8s} {'pardnn ms':>11s} {'etf ms':>11s} {'winner':8s} load")
    every = []
    for graph in args.graph:
        for devices, memory in [(d, m) for d in args.devices.split(",") for m in args.memory.split(",") if m]:
            runs = row(graph, args, devices, memory)
            every += runs
            print(summary(runs), flush=True)
    if args.out:
        tmp = args.out + ".csv.tmp"
        with open(tmp, "w", newline="") as f:
            f.write(csv_comment())
            w = csv.DictWriter(f, COLUMNS)
            w.writeheader()
            w.writerows(every)
        os.replace(tmp, args.out + ".csv")
    return 0


if __name__ == "__main__":
    sys.exit(main())

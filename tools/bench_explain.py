"""How long `pardnn explain` takes on a place output (docs/explain.md).

    python -m tools.bench_explain PLACED_DIR [--repeat 3]

Prints the best-of-N wall time of the whole command in a fresh interpreter
(`python -m pardnn explain PLACED_DIR --no-place-again`, imports and the numba cache
included: what a user waits for), then of its parts in this process: opening the
folder (loading the profile, reading placement.csv, emulating again and checking
report.json), the explanation (layers, path, memory, the what-ifs that need no new
placement) and the HTML page. CPU seconds next to wall seconds show how much a busy
machine slowed the wall clock.
"""

import argparse
import os
import subprocess
import sys
import tempfile
import time

from tools.commit_line import print_commit

from pardnn.explain import explain
from pardnn.explain.page import write_page
from pardnn.explain.placed import open_placed, placed_cluster, read_inputs


def timed(repeat, func):
    """(best wall seconds, CPU seconds of that run, result) over `repeat` runs."""
    best = None
    for _ in range(repeat):
        wall, cpu = time.perf_counter(), time.process_time()
        result = func()
        run = (time.perf_counter() - wall, time.process_time() - cpu, result)
        best = run if best is None or run[0] < best[0] else best
    return best


def command(repeat, placed):
    """(best wall seconds, CPU seconds of that run) of the command in a fresh interpreter."""
    runs = []
    for _ in range(repeat):
        before, wall = os.times(), time.perf_counter()
        subprocess.run([sys.executable, "-m", "pardnn", "explain", placed, "--no-place-again"], check=True,
                       stdout=subprocess.DEVNULL)
        after = os.times()
        runs.append((time.perf_counter() - wall, after.children_user - before.children_user
                     + after.children_system - before.children_system))
    return min(runs)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("placed", metavar="PLACED_DIR")
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args(argv)
    print_commit()
    print(f"load average {os.getloadavg()[0]:.2f}; best of {args.repeat}")
    rows = [("pardnn explain (fresh interpreter)", *command(args.repeat, args.placed))]
    inputs = read_inputs(args.placed)
    cluster = placed_cluster(args.placed, inputs)
    wall, cpu, placed = timed(args.repeat, lambda: open_placed(args.placed, inputs, cluster))
    rows.append(("open: load, read placement.csv, emulate, check", wall, cpu))
    wall, cpu, explanation = timed(args.repeat, lambda: explain(placed, place_again=False))
    rows.append(("explain (no placing again)", wall, cpu))
    with tempfile.TemporaryDirectory() as tmp:
        page = os.path.join(tmp, "e.html")
        rows.append(("--html page", *timed(args.repeat, lambda: write_page(explanation, placed, 5, page))[:2]))
    print(f"graph: {placed.graph.num_nodes} nodes, {placed.graph.num_edges} edges, "
          f"{placed.cluster.num_devices} devices, {explanation['layers']['count']} layers")
    for label, wall, cpu in rows:
        print(f"  {label:<50} {wall:7.2f} s wall  {cpu:7.2f} s CPU")


if __name__ == "__main__":
    main()

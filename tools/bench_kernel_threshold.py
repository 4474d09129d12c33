"""Where kernels should switch from interpreted to compiled (pardnn.base.compiled.INTERPRETED_BELOW).

    python -m tools.bench_kernel_threshold [--sizes 250,500,1000,2000,4000] [--k 4] [--repeat 3]

For each size, a synthetic training-like graph (tools/synth_graph.py, seed 0) is
written as a cost graph JSON and placed by `pardnn place --algorithm pardnn` in fresh
processes: once with every kernel interpreted, once with every kernel compiled (numba's
on-disk cache already warm, as on every run after the first). The wall time of the
whole command is what a user waits for; the best of --repeat runs is printed, with the
placement's makespan to show both ways place the same.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time


from tools.commit_line import print_commit

HERE = os.path.dirname(os.path.abspath(__file__))

# Runs `pardnn place` with the size rule forced one way; argv: mode, graph, K, out dir.
RUN = """
import sys
import pardnn.base.compiled as compiled
compiled.INTERPRETED_BELOW = 10**12 if sys.argv[1] == "interpreted" else 0
from pardnn.cli import main
sys.exit(main(["place", sys.argv[2], "--devices", f"cpu:{sys.argv[3]}", "-o", sys.argv[4]]))
"""


def wall(mode, graph, k, out) -> tuple:
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", RUN, mode, graph, str(k), out],
                          capture_output=True, text=True, check=True)
    seconds = time.perf_counter() - t0
    makespan = next(line for line in done.stdout.splitlines() if "makespan" in line).strip()
    return seconds, makespan


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="250,500,1000,2000,4000")
    p.add_argument("--k", type=int, default=4)
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args(argv)
    from tools.synth_graph import synth_graph
    print_commit()
    print(f"pardnn place on cpu:{args.k}, best of {args.repeat} fresh processes; seconds of wall time")
    print(f"{'nodes':>7} {'interpreted':>12} {'compiled':>9}  same placement")
    with tempfile.TemporaryDirectory() as tmp:
        wall("compiled", _graph(synth_graph(400, seed=0), tmp), args.k, f"{tmp}/warm")  # fill the cache
        for size in [int(x) for x in args.sizes.split(",")]:
            path = _graph(synth_graph(size, seed=0), tmp)
            runs = {mode: [wall(mode, path, args.k, f"{tmp}/{mode}") for _ in range(args.repeat)]
                    for mode in ("interpreted", "compiled")}
            best = {mode: min(r[0] for r in rs) for mode, rs in runs.items()}
            same = runs["interpreted"][0][1] == runs["compiled"][0][1]
            print(f"{size:>7} {best['interpreted']:>12.2f} {best['compiled']:>9.2f}  {'yes' if same else 'NO'}")
    return 0


def _graph(graph, tmp) -> str:
    path = os.path.join(tmp, f"g{graph.num_nodes}.json")
    graph.to_json(path)
    return path


if __name__ == "__main__":
    sys.exit(main())

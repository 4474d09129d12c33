"""How fast the emulator judges a placement (issue #3 target: 200k nodes, 16 devices, < 2 s).

    python -m tools.bench_emulator [--nodes 200000] [--devices dgx2] [--repeat 3]

Builds a synthetic training-like graph (tools/synth_graph.py), places it round-robin
(the placement with the most cross-device traffic, so the worst case for the
transfer bookkeeping) and with ParDNN, and prints the best-of-N wall time of the
scheduler emulation, the memory tracking, and both together.
"""

import argparse
import sys
import time


from tools.synth_graph import synth_graph

from pardnn.pipeline.portfolio import build
from pardnn.placers import registry as algorithms
from pardnn.hardware import parse_devices
from pardnn.emulator.memory import track_memory
from pardnn.emulator.scheduler import simulate
from tools.commit_line import print_commit


def best_of(repeat, func):
    times, result = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = func()
        times.append(time.perf_counter() - t0)
    return min(times), result


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nodes", type=int, default=200_000)
    p.add_argument("--devices", default="dgx2")
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args(argv)
    print_commit()
    graph = synth_graph(args.nodes, seed=0)
    cluster = parse_devices(args.devices)
    print(f"graph: {graph.num_nodes} nodes, {graph.num_edges} edges; cluster {args.devices} "
          f"({cluster.num_devices} devices); best of {args.repeat}")
    print(f"{'placement':<12} {'simulate s':>11} {'memory s':>9} {'total s':>8} {'makespan ms':>12}")
    for name in ("round-robin", "pardnn"):
        device = build(graph, cluster, algorithms.candidates(name)[0], {})
        t_sim, schedule = best_of(args.repeat, lambda device=device: simulate(graph, cluster, device))
        t_mem, _ = best_of(args.repeat, lambda device=device, schedule=schedule: track_memory(graph, cluster, device, schedule))
        print(f"{name:<12} {t_sim:>11.3f} {t_mem:>9.3f} {t_sim + t_mem:>8.3f} {schedule.makespan / 1e3:>12.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

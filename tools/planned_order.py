"""How much of the gap a planned op order would close, on the emulator (issue #30, item 3).

    python -m tools.planned_order [--graphs a.json,b.json] [--synth 120,300] [--k 2,4,8]

For each cost graph (CostGraph JSON files, e.g. from `CostGraph.to_json` of a profile,
and synthetic graphs of tools/synth_graph.py, seed 0) and K virtual CPUs with unlimited
memory, it compares, all emulated (pardnn.emulator):
  - pardnn's placement (`--algorithm pardnn`) as TF's executor runs it (FIFO per device);
  - the same placement with a planned order: control edges between consecutive ops of
    each device in the order of the exact model's best schedule for that placement
    (pardnn.placers.exact with the placement fixed), which is what `placed_graph.pb`
    would carry;
  - the exact model's own placement, FIFO and with its schedule's order;
  - the report's lower bound.
The graphs are JSON, never profiles: the solves run in this process, which therefore
must not import TensorFlow (google/or-tools#3230).
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np


from tools.commit_line import print_commit

from pardnn.emulator.scheduler import simulate
from pardnn.graph import CostGraph
from pardnn.graph.order import device_chains, with_order
from pardnn.hardware import parse_devices
from pardnn.pipeline import place as placer
from pardnn.placers import exact

HERE = os.path.dirname(os.path.abspath(__file__))


def with_device_order(graph, device, start):
    """`graph` plus a zero-byte control edge from each op to the next one on its device,
    in the order of `start` (pardnn.graph.order.device_chains), and `device` renumbered
    to the new graph's ids."""
    ordered, new_id = with_order(graph, device_chains(graph, device, start))
    renumbered = np.empty(graph.num_nodes, np.int64)
    renumbered[new_id] = device
    return ordered, renumbered


def planned_us(graph, cluster, device, start) -> float:
    ordered, renumbered = with_device_order(graph, np.asarray(device), start)
    return simulate(ordered, cluster, renumbered).makespan


def case(name, graph, k) -> str:
    cluster = parse_devices(f"cpu:{k}").with_options(memory=2**50)
    placement, report = placer.place(graph, cluster, "pardnn")
    report = report.to_json()
    device = np.asarray(placement.device)
    own = exact.solve_here(graph, cluster, fixed=device)
    free = exact.solve(graph, cluster)
    best = free.placements[0]
    bound = report["lower_bound_us"]
    values = {"pardnn": report["makespan_us"], "pardnn ordered": planned_us(graph, cluster, device, own.starts_us),
              "exact": simulate(graph, cluster, best).makespan,
              "exact ordered": planned_us(graph, cluster, best, free.starts_us)}
    return (f"{name} ({graph.num_nodes} nodes) cpu:{k}: bound {bound:.1f} us; "
            + "; ".join(f"{key} {v:.1f} us ({v / bound:.3f}x)" for key, v in values.items()))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--graphs", default="", help="CostGraph JSON files, comma-separated")
    p.add_argument("--synth", default="120,300")
    p.add_argument("--k", default="2,4,8")
    args = p.parse_args(argv)
    from tools.synth_graph import synth_graph
    graphs = [(os.path.basename(path), CostGraph.from_json(path)) for path in args.graphs.split(",") if path]
    graphs += [(f"synth {n}", synth_graph(int(n), seed=0)) for n in args.synth.split(",") if n]
    print_commit()
    for name, graph in graphs:
        for k in (int(x) for x in args.k.split(",")):
            print(case(name, graph, k), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

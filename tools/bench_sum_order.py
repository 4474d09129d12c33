"""What an order carried by the placement would do to the least memory (issue 40, item 3).

    python -m tools.bench_sum_order --profiles DIR [--families word-rnn,char-crn]
        [--k 1,2,4,8] [--inputs 4] [--csv FILE]

The rows of tools/bench_least_memory.py that no placement closes are recurrent
networks, whose one-device emulated peak is already 1.26-1.33x the least-memory
bound: TensorFlow's executor (and the emulator, pardnn.emulator.scheduler) runs each
per-timestep weight gradient as soon as it can, so the gradients of every weight
pile up at once, each weight's waiting for its sum (an AddN of one input per
timestep). The bound allows any order; FIFO is one order.

This measures, on the emulator only, the order a placement could carry as control
edges in placed_graph.pb (not built: pardnn writes no such edges): the big sums (AddN
or AccumulateNV2 with at least `--inputs` data inputs) run one after another, in the
order the one-device emulation starts them, each one's producers held back by a
zero-byte control edge from the previous sum (not where the producer already precedes
the previous sum, the edges added before included: that edge would close a cycle),
applied by pardnn.graph.order.
For each graph and K (cpu:K, no reserve) it prints the least-memory bound of the
graph as profiled, and pardnn's least fitting memory (bisected as `pardnn capacity`
does) on the graph as profiled and on the graph with the order, each over that
bound; and the emulated step there.
Profiles are made in DIR as tools/bench_least_memory.py makes them.
"""

from __future__ import annotations

import argparse

import numpy as np

from tools.bench_least_memory import profile_dir
from tools.commit_line import print_commit, write_rows

SUMS = ("AddN", "AccumulateNV2")


def with_sum_order(graph, inputs=4):
    """(graph plus the control edges, edges added): the big sums one after another."""
    from pardnn.emulator.scheduler import simulate
    from pardnn.hardware import parse_devices
    one = parse_devices("cpu:1")
    start = simulate(graph, one, np.zeros(graph.num_nodes, np.int32)).start
    data = graph.edge_slot >= 0
    fan_in = np.bincount(graph.edge_dst[data], minlength=graph.num_nodes)
    sums = [n for n in range(graph.num_nodes) if graph.ops[n] in SUMS and fan_in[n] >= inputs]
    sums.sort(key=lambda n: (start[n], n))
    import networkx as nx
    from pardnn.graph.order import Order, with_order
    whole = nx.DiGraph(zip(graph.edge_src.tolist(), graph.edge_dst.tolist()))
    edges = []
    for before, after in zip(sums, sums[1:]):
        for p in sorted(set(graph.edge_src[data & (graph.edge_dst == after)].tolist())):
            if p == before or nx.has_path(whole, p, before):      # the edge would close a cycle
                continue
            whole.add_edge(before, p)
            edges.append((before, p))
    pairs = np.array(edges, np.int64).reshape(-1, 2)
    return with_order(graph, Order(pairs[:, 0].copy(), pairs[:, 1].copy()))[0], len(edges)


def least_fit(graph, k):
    """(least memory pardnn fits in on cpu:k, step there in us)."""
    from pardnn.hardware import parse_devices
    from pardnn.pipeline.capacity import count_row
    from tools.placement_snapshot import one_device_peak
    cluster = parse_devices(f"cpu:{k}").with_options(memory=one_device_peak(graph), reserve=0.0)
    row = count_row(graph, cluster, "pardnn")
    return row.least.memory, row.least.report.makespan_us


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profiles", required=True, metavar="DIR", help="profile dirs (made when missing)")
    ap.add_argument("--families", default="word-rnn,char-crn")
    ap.add_argument("--k", default="1,2,4,8")
    ap.add_argument("--inputs", type=int, default=4, help="data inputs a sum needs to be ordered")
    ap.add_argument("--csv", metavar="FILE")
    args = ap.parse_args(argv)
    print_commit()
    from pardnn.pipeline.load import load_cost_graph
    from pardnn.repair.least_memory import least_memory
    rows = []
    print("graph K bound fifo fifo/bound ordered ordered/bound step_fifo_us step_ordered_us edges")
    for name in [f for f in args.families.split(",") if f]:
        graph, _ = load_cost_graph(profile_dir(args.profiles, name))
        ordered, added = with_sum_order(graph, args.inputs)
        for k in [int(x) for x in args.k.split(",")]:
            bound = least_memory(graph, k).bytes
            (fifo, fifo_us), (order, order_us) = least_fit(graph, k), least_fit(ordered, k)
            rows.append({"graph": name, "k": k, "bound_bytes": bound, "fifo_bytes": fifo, "ordered_bytes": order,
                         "fifo_step_us": round(fifo_us, 1), "ordered_step_us": round(order_us, 1),
                         "control_edges": added})
            print(name, k, bound, fifo, f"{fifo / bound:.3f}", order, f"{order / bound:.3f}",
                  f"{fifo_us:.1f}", f"{order_us:.1f}", added, flush=True)
    if args.csv and rows:
        write_rows(args.csv, rows)


if __name__ == "__main__":
    main()

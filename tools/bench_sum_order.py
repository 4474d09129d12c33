"""What the order lever does to the least memory and to the step (issue 51, item 2).

    python -m tools.bench_sum_order --profiles DIR [--families word-rnn,char-crn,e3d]
        [--k 2,4,8] [--csv FILE]

The rows of tools/bench_least_memory.py that no FIFO placement closes are recurrent
networks: TensorFlow's executor (and the emulator, pardnn.emulator.scheduler) runs each
per-timestep weight gradient as soon as it can, so the gradients of every weight
pile up at once, each weight's waiting for its sum (an AddN of one input per
timestep); after a global-norm clip, every clipped gradient waits for its update.
The bound allows any order; FIFO is one order.

Where no placement fits in FIFO order, `pardnn capacity` (pardnn.pipeline.capacity)
tries the orders of pardnn.graph.memory_orders (the big sums one after another, then
the optimizer's updates too), carried as control edges by the placement
(pardnn.pipeline.order_lever). For each graph and K (cpu:K, no reserve) this prints
the least-memory bound, pardnn's least fitting memory without orders and with them,
each over the bound, the order used there and its edges; the emulated step of each;
and the placement found with the order emulated without it (FIFO): its step and its
peak over the bound (what the order saves, at what cost in step time).
Profiles are made in DIR as tools/bench_least_memory.py makes them.
"""

from __future__ import annotations

import argparse

from tools.bench_least_memory import profile_dir
from tools.commit_line import print_commit, write_rows


def with_sum_order(graph, inputs=4):
    """(graph plus the control edges, edges added): the big sums one after another
    (pardnn.graph.memory_orders.sum_order)."""
    import numpy as np

    from pardnn.emulator.scheduler import simulate
    from pardnn.graph.memory_orders import sum_order
    from pardnn.graph.order import with_order
    from pardnn.hardware import parse_devices
    start = simulate(graph, parse_devices("cpu:1"), np.zeros(graph.num_nodes, np.int32)).start
    order = sum_order(graph, start, inputs=inputs)
    return with_order(graph, order)[0], len(order)


def row_of(graph, k) -> dict:
    """The measures of the module docstring on cpu:k."""
    import numpy as np

    from pardnn.hardware import parse_devices
    from pardnn.pipeline.capacity import count_row
    from pardnn.pipeline.report import evaluate
    from pardnn.repair.least_memory import least_memory
    from tools.placement_snapshot import one_device_peak
    cluster = parse_devices(f"cpu:{k}").with_options(memory=one_device_peak(graph), reserve=0.0)
    bound = least_memory(graph, k).bytes
    fifo, lever = count_row(graph, cluster, "pardnn", orders=False), count_row(graph, cluster, "pardnn")
    placement = lever.least.placement
    edges = 0 if placement.order is None else len(placement.order)
    as_fifo = evaluate(graph, cluster, placement.device)        # the same placement, TF's own order
    return {"k": k, "bound_bytes": bound, "fifo_bytes": fifo.least.memory,
            "ordered_bytes": lever.least.memory, "order": placement.schedule_name if edges else "",
            "control_edges": edges, "fifo_step_us": round(fifo.least.report.makespan_us, 1),
            "ordered_step_us": round(lever.least.report.makespan_us, 1),
            "unordered_step_us": round(as_fifo.makespan_us, 1),
            "unordered_peak_bytes": int(np.max(as_fifo.peak_memory_bytes))}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profiles", required=True, metavar="DIR", help="profile dirs (made when missing)")
    ap.add_argument("--families", default="word-rnn,char-crn,e3d")
    ap.add_argument("--k", default="2,4,8")
    ap.add_argument("--csv", metavar="FILE")
    args = ap.parse_args(argv)
    print_commit()
    from pardnn.pipeline.load import load_cost_graph
    rows = []
    print("graph K bound fifo/bound ordered/bound order edges step_fifo_us step_ordered_us "
          "same_placement_unordered: step_us peak/bound")
    for name in [f for f in args.families.split(",") if f]:
        graph, _ = load_cost_graph(profile_dir(args.profiles, name))
        for k in [int(x) for x in args.k.split(",")]:
            row = {"graph": name, **row_of(graph, k)}
            rows.append(row)
            b = row["bound_bytes"]
            print(name, k, b, f"{row['fifo_bytes'] / b:.3f}", f"{row['ordered_bytes'] / b:.3f}", row["order"] or "-",
                  row["control_edges"], row["fifo_step_us"], row["ordered_step_us"], row["unordered_step_us"],
                  f"{row['unordered_peak_bytes'] / b:.3f}", flush=True)
    if args.csv and rows:
        write_rows(args.csv, rows)


if __name__ == "__main__":
    main()

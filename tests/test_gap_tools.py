"""The gap in the summary, and the helpers of tools/gap_table.py,
tools/planned_order.py and tools/bench_sum_order.py, on hand-made inputs."""

import io

import numpy as np

from tools.gap_table import COLUMNS, best_candidate, render, with_best_of
from tools.bench_sum_order import with_sum_order
from tools.planned_order import planned_us, with_device_order

from pardnn.emulator.memory import track_memory
from pardnn.emulator.scheduler import simulate
from pardnn.graph import CostGraph
from pardnn.hardware import parse_devices
from pardnn.io.summary import print_summary


def test_the_summary_prints_the_gap_over_the_lower_bound():
    report = {"algorithm": "pardnn", "num_nodes": 3, "num_edges": 2, "devices": ["/cpu:0"],
              "makespan_us": 110.0, "single_device_us": 200.0, "lower_bound_us": 100.0,
              "memory_capacity_bytes": [1000], "nodes_per_device": [3], "comm_bytes": 0,
              "placement_seconds": 0.1}
    out = io.StringIO()
    print_summary(report, file=out)
    assert "lower bound 100.0 us (gap 1.100x)" in out.getvalue()


def test_the_best_candidate_counts_refined_ones_and_skips_infeasible_ones():
    report = {"makespan_us": 100.0, "candidates": {
        "step1": {"feasible": True, "makespan_us": 100.0},
        "etf": {"feasible": True, "makespan_us": 120.0, "refined_makespan_us": 95.0},
        "metis": {"feasible": False, "makespan_us": 50.0},
        "heft": {"skipped": "time budget spent"}}}
    assert best_candidate(report) == (95.0, "etf refined")


def test_an_unlimited_row_takes_the_better_placement_of_the_limited_row():
    free = {"makespan_us": 110.0, "best_us": 110.0, "best_by": "pardnn", "over_best": 1.0}
    tight = {"memory": "0.6x peak", "best_us": 100.0, "best_by": "etf refined"}
    assert with_best_of(free, tight)["over_best"] == 1.1
    assert with_best_of(free, {**tight, "best_us": 120.0}) is free


def test_the_table_renders_from_its_csv(tmp_path):
    path = tmp_path / "gap.csv"
    path.write_text("# commit abc1234\n" + ",".join(COLUMNS) + "\n"
                    "g,10,2,unlimited,110,100,90,True,105,etf refined,1.1,1.0476,0.5,\n"
                    "g,10,2,0.6x peak,,,90,True,,,,,,memory: it cannot fit\n")
    table = render(path)
    assert table.startswith("Measured at commit abc1234.")
    assert "| g | 10 | 2 | unlimited | 110.0 us | 100.0 us | 90.0 us | yes | 1.100 | 105.0 us (etf refined) | 1.048 |" \
        in table
    assert "infeasible: memory: it cannot fit" in table


def test_a_planned_order_makes_the_emulator_run_the_later_ready_op_first():
    # a (1 us) feeds b (1 us), which feeds d (10 us) on the other device; c (10 us) is
    # ready at once. First-ready-first runs a, c, b (c was ready before b): d starts at 12
    # and the step ends at 22. The planned order a, b, c starts d at 2: 12.
    g = CostGraph.build(names=["a", "b", "c", "d"], comp_us=[1, 1, 10, 10], out_bytes=[8] * 4,
                        edge_src=["a", "b"], edge_dst=["b", "d"], edge_bytes=[8, 8])
    c = parse_devices("cpu:2").with_options(latency=0.0, bandwidth=float("inf"))
    device = np.array([0, 0, 0, 1])                    # d on its own device
    assert simulate(g, c, device).makespan == 22        # a, c, b on device 0; d after b at 12
    start = np.array([0.0, 1.0, 2.0, 2.0])              # planned: a, b, then c
    ordered, renumbered = with_device_order(g, device, start)
    assert ordered.num_edges == g.num_edges + 1         # b -> c (a -> b is an edge already)
    assert planned_us(g, c, device, start) == 12


def _two_weights_through_time(steps=3):
    """Backward through time (d2 -> d1 -> d0, 10 us each) making, at each step, a
    100-byte gradient for each of two weights (1 us each), summed per weight at the
    end: FIFO runs every gradient when its d is ready, so all six pile up."""
    names, ops, comp, out, src, dst, size, slot = [], [], [], [], [], [], [], []

    def node(name, op, us, nbytes):
        names.append(name), ops.append(op), comp.append(us), out.append(nbytes)

    def edge(a, b, nbytes, k):
        src.append(a), dst.append(b), size.append(nbytes), slot.append(k)
    for t in reversed(range(steps)):
        node(f"d{t}", "MatMul", 10, 4)
        if t < steps - 1:
            edge(f"d{t + 1}", f"d{t}", 4, 0)
        for w in "ab":
            node(f"g{w}{t}", "MatMul", 1, 100)
            edge(f"d{t}", f"g{w}{t}", 4, 0)
    for w in "ab":
        node(f"sum_{w}", "AddN", 1, 100)
        for t in range(steps):
            edge(f"g{w}{t}", f"sum_{w}", 100, t)
    return CostGraph.build(names=names, ops=ops, comp_us=comp, out_bytes=out, edge_src=src,
                           edge_dst=dst, edge_bytes=size, edge_slot=slot)


def test_the_sum_order_runs_one_weights_gradients_after_the_others_sum():
    g = _two_weights_through_time()
    one = parse_devices("cpu:1")
    device = np.zeros(g.num_nodes, np.int32)

    def peak(graph):
        return int(track_memory(graph, one, device, simulate(graph, one, device)).peak_bytes[0])
    ordered, added = with_sum_order(g, inputs=3)
    assert added == 3 and ordered.num_edges == g.num_edges + 3    # sum_a -> gb0, gb1, gb2
    index = ordered.index()
    assert all(index["sum_a"] in ordered.predecessors(index[f"gb{t}"]).tolist() for t in range(3))
    assert peak(g) >= 600                        # six gradients alive before either sum
    assert peak(ordered) < 500                   # three, their sum, then the other three
    assert with_sum_order(g, inputs=4)[1] == 0   # no sum has four inputs

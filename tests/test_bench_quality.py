"""The target columns of tools/bench_quality.py on hand-made rows."""

import math

from tools.bench_quality import against, ceiling, lower_bound_us, targets

from pardnn.graph import CostGraph


def row(algorithm, makespan, preset="dgx-h100", k=4, graph="g", feasible=True, bound=50.0):
    return {"graph": graph, "nodes": 10, "preset": preset, "k": k, "memory": "unlimited",
            "algorithm": algorithm, "makespan_us": makespan, "feasible": feasible, "lower_bound_us": bound}


def test_against_compares_pardnn_with_round_robin_and_the_best_other_feasible_placer():
    by = {r["algorithm"]: r for r in [row("pardnn", 100), row("round-robin", 250), row("etf", 90),
                                       row("metis", 50, feasible=False)]}
    assert against(by) == (2.5, 100 / 90)
    by["pardnn"] = row("pardnn", 100, feasible=False)
    assert against(by) == (None, None)


def test_targets_take_the_geometric_mean_and_count_rows_within_the_best():
    rows = [row("pardnn", 100, k=4), row("round-robin", 400, k=4), row("etf", 120, k=4),
            row("pardnn", 100, k=8), row("round-robin", 100, k=8), row("etf", 80, k=8)]
    line = targets(rows)[-2]
    assert line == (f"| dgx-h100 | unlimited | 2 | {math.sqrt(4.0 * 1.0):.2f}x | 1 / 2 | 1.25x "
                    f"| {math.sqrt(8.0 * 2.0):.2f}x |")


def test_ceiling_is_round_robin_over_the_bound_and_missing_without_either():
    by = {"round-robin": row("round-robin", 300, bound=100.0)}
    assert ceiling(by) == 3.0
    assert ceiling({"round-robin": row("round-robin", 300, bound="")}) is None
    assert ceiling({"round-robin": row("round-robin", 300, feasible=False)}) is None
    assert ceiling({}) is None


def test_lower_bound_is_the_larger_of_balanced_work_and_the_critical_path():
    # a -> b (10 + 30) and c alone (20): 60 us of work, critical path 40 us
    g = CostGraph.build(names=["a", "b", "c"], comp_us=[10, 30, 20], edge_src=["a"], edge_dst=["b"],
                        edge_bytes=[8])
    assert lower_bound_us(g, 1) == 60.0
    assert lower_bound_us(g, 2) == 40.0
    assert lower_bound_us(g, 4) == 40.0

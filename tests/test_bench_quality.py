"""The target columns of tools/bench_quality.py on hand-made rows."""

import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
from bench_quality import against, targets  # noqa: E402


def row(algorithm, makespan, preset="dgx-h100", k=4, graph="g", feasible=True):
    return {"graph": graph, "nodes": 10, "preset": preset, "k": k, "memory": "unlimited",
            "algorithm": algorithm, "makespan_us": makespan, "feasible": feasible}


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
    assert line == f"| dgx-h100 | unlimited | 2 | {math.sqrt(4.0 * 1.0):.2f}x | 1 / 2 | 1.25x |"

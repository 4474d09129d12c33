"""Orchestrates a placement: run the chosen algorithm, check the rules, report.

Every placer goes through here, so every placement is judged the same way.
"""

import time

from pardnn import algorithms
from pardnn.constraints import violations
from pardnn.placement import Placement
from pardnn.report import base_report


def place(graph, cluster, algorithm="pardnn"):
    """Run `algorithm` on graph and cluster; returns (Placement, report dict)."""
    start = time.perf_counter()
    placer = algorithms.get(algorithm)
    timings = {}
    device = placer(graph, cluster, timings)
    problems = violations(graph, cluster, device)
    if problems:
        raise RuntimeError(f"placer {algorithm!r} broke a placement rule: {problems[0]}")
    placement = Placement(device, cluster, algorithm, stage_seconds=timings)
    report = base_report(graph, placement)
    report["stage_seconds"] = dict(timings)
    report["placement_seconds"] = time.perf_counter() - start
    return placement, report

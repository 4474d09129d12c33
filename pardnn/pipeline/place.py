"""Orchestrates a placement: the portfolio of the chosen algorithm (its candidates built,
each repaired for memory and judged, the best refined within memory), then the report.

Every placement is judged the same way, by the emulator (pardnn.emulator), whose fields
`pardnn emulate` reproduces exactly, after the memory repair (pardnn.repair, thesis
§4.1.2) against cluster.capacity (memory minus the reserve): it moves colocation groups
until every device fits, or raises UserError saying why it cannot. A plain algorithm
is a portfolio of one (pardnn.pipeline.portfolio). placement_seconds is the placers'
time plus the repairs' and the refinement's; judging the result is
stage_seconds["evaluate"]. lower_bound_us holds for every placement
(pipeline.report.judged_fields, docs/bounds.md).
"""

import time

import numpy as np

from pardnn.graph.constraints import violations
from pardnn.io.placement import Placement
from pardnn.pipeline.portfolio import choose
from pardnn.pipeline.report import base_report, judged_fields


def place(graph, cluster, algorithm="pardnn", budget_s=None):
    """Run `algorithm` on graph and cluster; returns (Placement, report dict).
    `budget_s` caps the portfolio's work after its first candidate (None: no cap)."""
    start = time.perf_counter()
    timings = {}
    chosen = choose(graph, cluster, algorithm, timings, budget_s)
    _check_rules(graph, cluster, chosen.raw, f"candidate {chosen.winner!r} of {algorithm!r}")
    fixed = chosen.judged
    _check_rules(graph, cluster, fixed.device, "the memory repair")
    placement = Placement(fixed.device, cluster, algorithm, stage_seconds=timings,
                          schedule=fixed.schedule, profile=fixed.profile)
    report = base_report(graph, placement)
    report["placement_seconds"] = time.perf_counter() - start
    t0 = time.perf_counter()
    report.update(judged_fields(graph, cluster, fixed.device, fixed.schedule, fixed.profile, chosen.bound_us))
    report.update(fixed.report_fields(cluster))
    report["changed_nodes"] = int(np.count_nonzero(fixed.device != chosen.raw))
    report.update(chosen.report_fields())
    report["stage_seconds"] = {**timings, "evaluate": time.perf_counter() - t0}
    return placement, report


def _check_rules(graph, cluster, device, who):
    problems = violations(graph, cluster, device)
    if problems:
        raise RuntimeError(f"{who} broke a placement rule: {problems[0]}")

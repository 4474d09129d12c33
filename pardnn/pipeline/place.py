"""Orchestrates a placement: run the chosen algorithm, repair it for memory, judge it,
and build the report.

Every placement is judged the same way, by the emulator (pardnn.emulator.evaluate),
whose fields `pardnn emulate` reproduces exactly. A plain placer's output goes through
the memory repair (pardnn.repair, thesis §4.1.2) against cluster.capacity (memory minus
the reserve): it moves colocation groups until every device fits, or raises UserError
saying why it cannot. `--algorithm pardnn` is a portfolio (registry.PORTFOLIOS): it
repairs and judges its own candidates and refines the winner within memory
(pardnn.placers.pardnn.candidates). Either way the final emulation is the one reported.
placement_seconds is the placer's time plus the repair's and that refinement's;
judging the result is stage_seconds["evaluate"]. lower_bound_us holds for every
placement: the emulator's (pardnn.emulator.bounds) or, on graphs small enough, the
exact model's proven bound (pardnn.placers.exact), whichever is larger.
"""

import time

import numpy as np

from pardnn.emulator import report_fields
from pardnn.graph.constraints import violations
from pardnn.io.placement import Placement
from pardnn.io.report import base_report
from pardnn.placers import exact, registry
from pardnn.repair.overflow_repair import repair


def place(graph, cluster, algorithm="pardnn", budget_s=None):
    """Run `algorithm` on graph and cluster; returns (Placement, report dict).
    `budget_s` bounds a portfolio's work after its first candidate (None: its default)."""
    start = time.perf_counter()
    timings, extra = {}, {}
    portfolio = registry.portfolio(algorithm)
    if portfolio is not None:
        chosen = portfolio(graph, cluster, timings, **({} if budget_s is None else {"budget_s": budget_s}))
        device, fixed, extra = chosen.raw, chosen.repaired, chosen.report_fields()
        _check_rules(graph, cluster, device, f"candidate {chosen.winner!r} of {algorithm!r}")
    else:
        device = registry.get(algorithm)(graph, cluster, timings)
        _check_rules(graph, cluster, device, f"placer {algorithm!r}")
        t0 = time.perf_counter()
        fixed = repair(graph, cluster, device)
        timings["repair"] = time.perf_counter() - t0
    _check_rules(graph, cluster, fixed.device, "the memory repair")
    placement = Placement(fixed.device, cluster, algorithm, stage_seconds=timings)
    report = base_report(graph, placement)
    report["placement_seconds"] = time.perf_counter() - start
    t0 = time.perf_counter()
    report.update(report_fields(graph, cluster, fixed.device, fixed.schedule, fixed.profile))
    report.update(fixed.report_fields(cluster))
    report["changed_nodes"] = int(np.count_nonzero(fixed.device != device))
    report.update(extra)
    report["lower_bound_us"] = max(report["lower_bound_us"], exact.proven_bound_us(graph, cluster))
    report["stage_seconds"] = {**timings, "evaluate": time.perf_counter() - t0}
    return placement, report


def _check_rules(graph, cluster, device, who):
    problems = violations(graph, cluster, device)
    if problems:
        raise RuntimeError(f"{who} broke a placement rule: {problems[0]}")

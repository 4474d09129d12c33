"""Orchestrates a placement: run the chosen algorithm, check the rules, report.

Every placer goes through here, so every placement is judged the same way: by the
emulator (pardnn.emulator.evaluate), whose fields `pardnn emulate` reproduces exactly.
After every placer the memory repair (pardnn.emulator.repair, thesis §4.1.2) runs
against cluster.capacity (memory minus the reserve): it moves colocation groups until
every device fits, or raises UserError saying why it cannot. Its final emulation is
the one reported. placement_seconds is the placer's time plus the repair's
(stage_seconds["repair"]); judging the result is stage_seconds["evaluate"].
"""

import time

from pardnn import algorithms
from pardnn.constraints import violations
from pardnn.emulator import report_fields
from pardnn.emulator.repair import repair
from pardnn.placement import Placement
from pardnn.report import base_report


def place(graph, cluster, algorithm="pardnn"):
    """Run `algorithm` on graph and cluster; returns (Placement, report dict)."""
    start = time.perf_counter()
    placer = algorithms.get(algorithm)
    timings = {}
    device = placer(graph, cluster, timings)
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
    report["stage_seconds"] = {**timings, "evaluate": time.perf_counter() - t0}
    return placement, report


def _check_rules(graph, cluster, device, who):
    problems = violations(graph, cluster, device)
    if problems:
        raise RuntimeError(f"{who} broke a placement rule: {problems[0]}")

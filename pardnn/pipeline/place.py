"""Orchestrates a placement: run the chosen algorithm, check the rules, report.

Every placer goes through here, so every placement is judged the same way: by the
emulator (pardnn.emulator.evaluate), whose fields `pardnn emulate` reproduces exactly.
After every placer the memory repair (pardnn.repair.overflow_repair, thesis §4.1.2) runs
against cluster.capacity (memory minus the reserve): it moves colocation groups until
every device fits, or raises UserError saying why it cannot. Its final emulation is
the one reported. For ParDNN, whose Step 1 ignores memory, refinement then runs
again on repaired placements (pardnn.placers.pardnn.memory_refinement, stage_seconds["refine_memory"]).
placement_seconds is the placer's time plus the repair's (stage_seconds["repair"])
and that refinement's; judging the result is stage_seconds["evaluate"].
"""

import time

import numpy as np

from pardnn.placers import registry as algorithms
from pardnn.graph.constraints import allowed_devices, violations
from pardnn.emulator import report_fields
from pardnn.repair.overflow_repair import repair
from pardnn.placers.pardnn.memory_refinement import refine_within_memory
from pardnn.io.placement import Placement
from pardnn.io.report import base_report


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
    fitted = None
    if fixed.rounds and algorithm in algorithms.REFINED_WITHIN_MEMORY:
        t0 = time.perf_counter()
        fitted = refine_within_memory(graph, cluster, fixed, allowed_devices(graph, cluster),
                                      rounds=cluster.num_devices)
        fixed = fitted.repaired
        timings["refine_memory"] = time.perf_counter() - t0
    _check_rules(graph, cluster, fixed.device, "the memory repair")
    placement = Placement(fixed.device, cluster, algorithm, stage_seconds=timings)
    report = base_report(graph, placement)
    report["placement_seconds"] = time.perf_counter() - start
    t0 = time.perf_counter()
    report.update(report_fields(graph, cluster, fixed.device, fixed.schedule, fixed.profile))
    report.update(fixed.report_fields(cluster))
    report["changed_nodes"] = int(np.count_nonzero(fixed.device != device))
    if fitted is not None:
        report["refine_memory"] = {"makespan_after_repair_us": fitted.makespan_before_us,
                                   "moved_nodes": fitted.refined_nodes, "batches": fitted.batches}
    report["stage_seconds"] = {**timings, "evaluate": time.perf_counter() - t0}
    return placement, report


def _check_rules(graph, cluster, device, who):
    problems = violations(graph, cluster, device)
    if problems:
        raise RuntimeError(f"{who} broke a placement rule: {problems[0]}")

"""`--algorithm pardnn`: build several candidate placements, repair each for memory
(Step 2, pardnn.repair), keep the fastest that fits, and refine it within memory.

No single method wins everywhere. Step 1 (thesis §4.1.1) ignores memory; on
near-chains that do not fit one device, cutting the graph into stages
(pardnn.placers.pardnn.stages) or a memory-aware list schedule does better; on
graphs with many parallel branches, a list schedule or a balanced min-cut can. So
the candidates are, in this order: Step 1, stages, Baechi's m-ETF, HEFT and a METIS
min-cut. The emulator judges each after the same repair every placement gets, and
the fastest feasible one (the earliest on ties; one whose repair moved more than
MAX_MOVED_SHARE of the nodes only when no other fits) is refined within memory (memory_refinement.py) until no
round gains or the time budget is spent. On a graph of PARALLEL_MIN_NODES or more,
the candidates after Step 1 are built and repaired in worker processes while Step 1
runs; a candidate not ready when the budget ends is skipped. The default budget is far above what graphs of 200k nodes
need, so the same input gives the same placement; a budget that cuts the work makes
the result depend on the machine's speed (report.json says when it did). report.json names the winner and every candidate's makespan.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import time
from dataclasses import dataclass, field

import numpy as np

from pardnn.errors import UserError
from pardnn.graph.constraints import allowed_devices
from pardnn.placers.baselines import etf, heft, metis_cut
from pardnn.placers.pardnn import stages, step1
from pardnn.placers.pardnn.memory_refinement import refine_within_memory
from pardnn.repair.overflow_repair import repair

DEFAULT_BUDGET_S = 300.0    # wall time for the whole placement; Step 1 always runs to the end
MAX_MOVED_SHARE = 0.10      # a winner whose repair moved more is taken only if no other fits
PARALLEL_MIN_NODES = 20_000  # smaller graphs build their candidates in this process

BUILDERS = (("step1", None), ("stages", stages.place), ("etf", etf.place), ("heft", heft.place),
            ("metis", metis_cut.place))


@dataclass
class Chosen:
    """The placement pardnn keeps, and what each candidate did."""

    winner: str
    raw: np.ndarray              # the winner's device per node before the repair
    repaired: object             # pardnn.repair.overflow_repair.Repair, refined within memory
    fitted: object               # memory_refinement.Fitted, or None when refinement did not run
    step1_output: str            # "thesis", "affinity" or "one-device": what Step 1 returned
    candidates: dict = field(default_factory=dict)

    def report_fields(self) -> dict:
        fields = {"candidate": self.winner, "step1_output": self.step1_output,
                  "candidates": self.candidates}
        if self.fitted is not None:
            fields["refine_memory"] = {"makespan_after_repair_us": self.fitted.makespan_before_us,
                                       "moved_nodes": self.fitted.refined_nodes,
                                       "batches": self.fitted.batches,
                                       "stopped_by_budget": self.fitted.stopped_by_budget}
        return fields


def choose(graph, cluster, timings=None, budget_s: float = DEFAULT_BUDGET_S) -> Chosen:
    """Build, repair and judge the candidates; refine the winner within memory."""
    timings = {} if timings is None else timings
    deadline = time.perf_counter() + budget_s
    with _workers(graph.num_nodes) as pool:
        pending = [(name, pool.apply_async(_candidate, (graph, cluster, name))) for name, _ in BUILDERS[1:]]
        first = step1.partition(graph, cluster, timings)
        results = [_judged(graph, cluster, first.device, 0.0)]
        for name, job in pending:
            results.append(_collect(job, deadline))
    built, report, repaired, errors = {}, {}, {}, []
    timings["repair"] = 0.0
    for (name, _), (device, entry, fixed, error, build_s, repair_s) in zip(BUILDERS, results):
        report[name] = entry
        if device is None:
            continue
        built[name] = device
        if name != "step1":
            timings[name] = build_s
        timings["repair"] += repair_s
        if fixed is not None:
            repaired[name] = fixed
        if error is not None:
            errors.append(error)
    if not repaired:
        raise errors[0]
    winner = _winner(repaired, graph.num_nodes)
    fixed, fitted = repaired[winner], None
    if winner != "step1" or fixed.rounds:       # Step 1 refined itself when nothing moved
        t0 = time.perf_counter()
        fitted = refine_within_memory(graph, cluster, fixed, allowed_devices(graph, cluster),
                                      rounds=cluster.num_devices, deadline=deadline)
        timings["refine_memory"] = time.perf_counter() - t0
        fixed = fitted.repaired
    return Chosen(winner, built[winner], fixed, fitted, _step1_output(first), report)


def _candidate(graph, cluster, name):
    """Build candidate `name` and judge it (runs in a worker process when there are any)."""
    t0 = time.perf_counter()
    device = np.asarray(dict(BUILDERS)[name](graph, cluster), np.int32)
    return _judged(graph, cluster, device, time.perf_counter() - t0)


def _judged(graph, cluster, device, build_s):
    """(device, report entry, Repair or None, UserError or None, build s, repair s)."""
    t0 = time.perf_counter()
    try:
        fixed, error = repair(graph, cluster, device), None
    except UserError as exc:
        fixed, error = None, exc
    repair_s = time.perf_counter() - t0
    entry = ({"feasible": False, "makespan_us": None, "reason": str(error)} if fixed is None else
             {"feasible": True, "makespan_us": fixed.schedule.makespan, "moved_nodes": int(fixed.moved.sum())})
    entry["seconds"] = build_s + repair_s
    return device, entry, fixed, error, build_s, repair_s


def _collect(job, deadline):
    """A candidate's result, or a skipped entry when the budget ends first."""
    try:
        return job.get(timeout=max(deadline - time.perf_counter(), 0.0))
    except multiprocessing.TimeoutError:
        return None, {"skipped": "time budget spent"}, None, None, 0.0, 0.0


@contextlib.contextmanager
def _workers(num_nodes):
    """Worker processes for the candidates after Step 1, which run beside it: one fewer
    than the CPUs, none for graphs under PARALLEL_MIN_NODES (a fork costs more than
    they take) or on one CPU. Without workers the candidates run in turn, each only
    while the budget lasts."""
    count = min(len(BUILDERS) - 1, (os.cpu_count() or 1) - 1)
    if num_nodes < PARALLEL_MIN_NODES or count < 1 or "fork" not in multiprocessing.get_all_start_methods():
        yield _InlinePool()
        return
    pool = multiprocessing.get_context("fork").Pool(count)
    try:
        yield pool
    finally:
        pool.terminate()


class _InlinePool:
    """The Pool interface, run in this process when the result is asked for."""

    def apply_async(self, func, args):
        return _Deferred(func, args)


class _Deferred:
    def __init__(self, func, args):
        self.func, self.args = func, args

    def get(self, timeout):
        if timeout <= 0:
            raise multiprocessing.TimeoutError
        return self.func(*self.args)


def _winner(repaired, num_nodes) -> str:
    """The fastest feasible candidate (the earliest on ties), among those whose repair moved
    at most MAX_MOVED_SHARE of the nodes when there are any."""
    order = [n for n, _ in BUILDERS]
    few = [n for n, r in repaired.items() if r.moved.sum() <= MAX_MOVED_SHARE * num_nodes]
    return min(few or repaired, key=lambda n: (repaired[n].schedule.makespan, order.index(n)))


def _step1_output(first) -> str:
    if first.one_device:
        return "one-device"
    return "affinity" if first.affinity else "thesis"

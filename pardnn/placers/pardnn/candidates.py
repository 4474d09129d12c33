"""`--algorithm pardnn`: build several candidate placements, repair each for memory
(Step 2, pardnn.repair), refine the two fastest that fit within memory, keep the faster.

No single method wins everywhere. Step 1 (thesis §4.1.1) ignores memory; on
near-chains that do not fit one device, cutting the graph into stages (stages.py)
does better; on other graphs a list schedule or a balanced min-cut can. The core
candidates are, in order: Step 1, stages, Baechi's m-ETF, HEFT, a METIS min-cut and,
on clusters of several hosts, the hierarchical placement (`pardnn-hier`: hosts first,
then Step 1 within each, or one host alone when that is faster);
on graphs under EXTRAS_MAX_NODES, or when no core candidate fits, also linear
clustering, m-TOPO, round-robin and one device. The emulator judges each after the
same repair every placement gets. The two fastest feasible ones (the earlier on
ties; one whose repair moved more than MAX_MOVED_SHARE of the nodes only when no
other fits) are refined within memory (memory_refinement.py), side by side when there
are workers, and the faster result wins; when the fastest is Step 1 and the repair
moved nothing, it wins as it is (it was refined already).

On graphs of PARALLEL_MIN_NODES or more, the candidates after Step 1 are built and
repaired in worker processes while Step 1 runs. The time budget skips candidates not
ready when it ends and stops the refinement; its default is far above what 200k-node
graphs need, so the same input gives the same placement (report.json says when the
budget cut). report.json names the winner and every candidate's makespan.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import time
from concurrent import futures
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from pardnn.errors import UserError
from pardnn.graph.constraints import allowed_devices
from pardnn.placers import exact, hierarchical
from pardnn.placers.baselines import etf, heft, linear, metis_cut, round_robin, single, topo
from pardnn.placers.pardnn import stages, step1
from pardnn.placers.pardnn.memory_refinement import refine_within_memory
from pardnn.repair.overflow_repair import repair

DEFAULT_BUDGET_S = 300.0    # wall time for the whole placement; Step 1 always runs to the end
MAX_MOVED_SHARE = 0.10      # a winner whose repair moved more is taken only if no other fits
PARALLEL_MIN_NODES = 20_000  # smaller graphs build their candidates in this process
REFINE_GRACE_S = 60.0       # how long past the deadline a worker's refinement may finish its batch

CORE = ("step1", "stages", "etf", "heft", "metis", "hier", "exact")   # hier: several hosts; exact: small graphs
EXTRAS = ("linear", "topo", "round-robin", "single")   # on small graphs, or when no core one fits
EXTRAS_MAX_NODES = 20_000
# The order workers take the candidates in: the slowest to build first, so that the
# main process, done with Step 1, takes the quick ones still waiting at the end.
SLOWEST_FIRST = ("exact", "hier", "etf", "heft", "linear", "stages", "metis", "topo", "round-robin", "single")
BUILDERS = {"stages": stages.place, "etf": etf.place, "heft": heft.place, "metis": metis_cut.place,
            "hier": hierarchical.place, "linear": linear.place, "topo": topo.place,
            "round-robin": round_robin.place, "single": single.place, "exact": exact.place}


class Judged(NamedTuple):
    """One candidate after its repair and emulation."""

    device: object               # int32 per node as built, or None when it was not built
    entry: dict                  # its report.json entry under `candidates`
    repaired: object             # the Repair, or None when it cannot fit
    error: object                # the repair's UserError, or None
    build_s: float
    repair_s: float


SKIPPED = Judged(None, {"skipped": "time budget spent"}, None, None, 0.0, 0.0)
DIED = Judged(None, {"feasible": False, "makespan_us": None, "reason": "its worker process died"},
              None, None, 0.0, 0.0)


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
    """Build, repair and judge the candidates; refine the two fastest within memory."""
    timings = {} if timings is None else timings
    deadline = time.perf_counter() + budget_s
    names = [n for n in SLOWEST_FIRST if (n in CORE or graph.num_nodes < EXTRAS_MAX_NODES)
             and (n != "hier" or len(cluster.hosts) > 1) and (n != "exact" or exact.applies(graph, cluster))]
    with _workers(graph, cluster, names) as pool:
        pending = {name: pool.submit(name) for name in names}
        first = step1.partition(graph, cluster, timings)
        results = {"step1": _judged(graph, cluster, first.device, 0.0, first.schedule)}
        for name in reversed(names):            # help with those no worker has started yet
            if pool.claim(name):
                results[name] = _collect(_Inline(graph, cluster).submit(name), deadline)
        results.update({name: _collect(pending[name], deadline) for name in CORE + EXTRAS
                        if name in pending and name not in results})
        if all(r.repaired is None for r in results.values()):      # nothing fits yet: the rest
            inline = _Inline(graph, cluster)
            results.update({name: _collect(inline.submit(name), deadline)
                            for name in EXTRAS if name not in results})
        ordered = {name: results[name] for name in CORE + EXTRAS if name in results}
        return _pick(graph, cluster, ordered, _step1_output(first), timings, deadline, pool)


def _pick(graph, cluster, results, step1_output, timings, deadline, pool) -> Chosen:
    """The faster of the two best candidates once each is refined within memory: the
    first here, the second by a worker beside it (or after it, without workers), as a
    runner-up can refine past the winner (docs/algorithm.md, "Candidates"). When Step 1
    wins without the repair moving anything, nothing is refined: refining the runner-up
    alone would cost time that nothing runs beside; except on graphs small enough for
    the exact candidate, where refining is cheap."""
    report = {name: r.entry for name, r in results.items()}
    repaired = {name: r.repaired for name, r in results.items() if r.repaired is not None}
    if not repaired:
        raise next(r.error for r in results.values() if r.error is not None)
    timings["repair"] = sum(r.repair_s for r in results.values())
    timings.update({name: r.build_s for name, r in results.items()
                    if name != "step1" and r.device is not None})
    finalists = _finalists(repaired, graph.num_nodes)
    if not _refinable(finalists[0], repaired) and "exact" not in results:
        finalists = finalists[:1]   # Step 1 won as it is: no refinement for the runner-up to run beside
    t0 = time.perf_counter()
    jobs = {name: pool.refine(repaired[name], deadline) for name in finalists[1:] if _refinable(name, repaired)}
    fitted = {name: _refined(graph, cluster, repaired[name], deadline)
              for name in finalists[:1] if _refinable(name, repaired)}
    fitted.update({name: _collect_refined(job, deadline) for name, job in jobs.items()})
    if fitted:
        timings["refine_memory"] = time.perf_counter() - t0
    final = {name: fitted[name].repaired if fitted.get(name) else repaired[name] for name in finalists}
    for name in fitted:
        report[name]["refined_makespan_us"] = final[name].schedule.makespan
    winner = min(finalists, key=lambda n: (final[n].schedule.makespan, finalists.index(n)))
    return Chosen(winner, results[winner].device, final[winner], fitted.get(winner), step1_output, report)


def _refined(graph, cluster, fixed, deadline):
    """`fixed` refined within memory (memory_refinement.py), at most K rounds."""
    return refine_within_memory(graph, cluster, fixed, allowed_devices(graph, cluster),
                                rounds=cluster.num_devices, deadline=deadline)


def _refinable(name, repaired) -> bool:
    """Step 1 refined itself, so it is refined again only when its repair moved nodes."""
    return name != "step1" or repaired[name].rounds > 0


def _collect_refined(job, deadline):
    """A worker's refinement (it stops itself at the deadline), or None if it died."""
    try:
        return job.result(timeout=max(deadline - time.perf_counter(), 0.0) + REFINE_GRACE_S)
    except (futures.TimeoutError, BrokenProcessPool):
        return None


def _candidate(graph, cluster, name):
    """Build candidate `name` and judge it (runs in a worker process when there are any)."""
    t0 = time.perf_counter()
    device = np.asarray(BUILDERS[name](graph, cluster), np.int32)
    return _judged(graph, cluster, device, time.perf_counter() - t0)


def _judged(graph, cluster, device, build_s, schedule=None) -> Judged:
    """The candidate `device` repaired and emulated (`schedule`: its emulation, if known)."""
    t0 = time.perf_counter()
    try:
        fixed, error = repair(graph, cluster, device, schedule), None
    except UserError as exc:
        fixed, error = None, exc
    repair_s = time.perf_counter() - t0
    entry = ({"feasible": False, "makespan_us": None, "reason": str(error)} if fixed is None else
             {"feasible": True, "makespan_us": fixed.schedule.makespan, "moved_nodes": int(fixed.moved.sum())})
    entry["seconds"] = build_s + repair_s
    return Judged(device, entry, fixed, error, build_s, repair_s)


def _collect(job, deadline):
    """A candidate's result; a skipped entry once the budget has ended (with or without
    workers alike), a failed one when its worker process died."""
    remaining = deadline - time.perf_counter()
    try:
        if remaining <= 0:
            raise futures.TimeoutError
        return job.result(timeout=remaining)
    except futures.TimeoutError:
        return SKIPPED._replace(entry=dict(SKIPPED.entry))
    except BrokenProcessPool:
        return DIED._replace(entry=dict(DIED.entry))


_SHARED = {}    # what the forked workers inherit (never pickled to them)


def _shared_refine(fixed, deadline):
    """A worker's job: refine the repaired placement `fixed` within memory."""
    return _refined(_SHARED["graph"], _SHARED["cluster"], fixed, deadline)


def _shared_candidate(name):
    """A worker's job: candidate `name`, or None when the main process claimed it first."""
    if not _claimed(_SHARED["claims"], _SHARED["names"].index(name)):
        return None
    return _candidate(_SHARED["graph"], _SHARED["cluster"], name)


def _claimed(claims, index) -> bool:
    """Mark candidate `index` taken; True when this caller is the first to take it."""
    with claims.get_lock():
        first = not claims[index]
        claims[index] = 1
    return first


@contextlib.contextmanager
def _workers(graph, cluster, names):
    """Worker processes for the candidates `names`, which run beside Step 1: one fewer
    than the CPUs this process may use, none for graphs under PARALLEL_MIN_NODES (a fork
    costs more than they take) or on one CPU. Without workers the candidates run in
    turn. Workers still running when the placement moves on are killed."""
    count = min(len(names), _usable_cpus() - 1)
    if graph.num_nodes < PARALLEL_MIN_NODES or count < 1 or "fork" not in multiprocessing.get_all_start_methods():
        yield _Inline(graph, cluster)
        return
    context = multiprocessing.get_context("fork")
    _SHARED.update(graph=graph, cluster=cluster, names=list(names), claims=context.Array("b", len(names)))
    pool = futures.ProcessPoolExecutor(count, mp_context=context)
    try:
        yield _Forked(pool)
    finally:
        processes = list((getattr(pool, "_processes", None) or {}).values())
        pool.shutdown(wait=False, cancel_futures=True)
        for process in processes:
            process.kill()
        _SHARED.clear()


def _usable_cpus() -> int:
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


class _Forked:
    """Candidates built by worker processes, each the first not yet claimed."""

    def __init__(self, pool):
        self.pool = pool

    def submit(self, name):
        return self.pool.submit(_shared_candidate, name)

    def refine(self, fixed, deadline):
        return self.pool.submit(_shared_refine, fixed, deadline)

    @staticmethod
    def claim(name) -> bool:
        """Take candidate `name` for this process if no worker has started it."""
        return _claimed(_SHARED["claims"], _SHARED["names"].index(name))


class _Inline:
    """Candidates built in this process, each when its result is asked for."""

    def __init__(self, graph, cluster):
        self.graph, self.cluster = graph, cluster

    def submit(self, name):
        return _Deferred(lambda: _candidate(self.graph, self.cluster, name))

    def refine(self, fixed, deadline):
        return _Deferred(lambda: _refined(self.graph, self.cluster, fixed, deadline))

    @staticmethod
    def claim(name) -> bool:
        return False            # nothing runs elsewhere: every candidate is built when collected


class _Deferred:
    def __init__(self, build):
        self.build = build

    def result(self, timeout):
        return self.build()


def _finalists(repaired, num_nodes) -> list:
    """The two fastest feasible candidates (the earlier on ties), among those whose repair
    moved at most MAX_MOVED_SHARE of the nodes when there are any."""
    order = list(CORE + EXTRAS)
    few = [n for n, r in repaired.items() if r.moved.sum() <= MAX_MOVED_SHARE * num_nodes]
    return sorted(few or repaired, key=lambda n: (repaired[n].schedule.makespan, order.index(n)))[:2]


def _step1_output(first) -> str:
    if first.one_device:
        return "one-device"
    return "affinity" if first.affinity else "thesis"

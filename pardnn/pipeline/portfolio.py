"""The portfolio stage: build an algorithm's candidate placements, judge each (repair,
then emulate: judge.py), refine the two fastest feasible ones within memory
(refine_memory.py), keep the faster. Which placers are candidates, and in what role,
is the registry's table (pardnn.placers.registry); a plain `--algorithm etf` is a
portfolio of one, judged the same way, neither refined nor reported as candidates.

No single method wins everywhere (docs/algorithm.md, "Candidates"). `--algorithm
pardnn` builds ParDNN's Step 1 (the FIRST candidate) in this process and the CORE
ones (HOSTS too on clusters of several hosts), and on graphs under EXTRAS_MAX_NODES,
or when no core candidate fits, the EXTRA ones; a candidate whose registry entry has
an `applies` test runs only where it passes (the exact model: small graphs). The two
fastest feasible ones (the earlier in the registry's order on ties; one whose repair
moved more than MAX_MOVED_SHARE of the nodes only when no other fits) are refined
within memory, side by side when there are workers, and the faster result wins; when
the fastest is Step 1 and the repair moved nothing, it is not refined again (it was
refined already), and only on graphs of at most RUNNER_UP_MAX_NODES nodes is the
runner-up refined to challenge it.

On graphs of workers.PARALLEL_MIN_NODES or more, the candidates after the FIRST one are built
and judged in worker processes (pardnn.pipeline.workers) while it runs; when only the
winner is refined, a worker tracks its memory peaks (its peaks before repair, for the
report) meanwhile, and finds report.json's lower bound. The answer never depends on a
wall clock: with no `budget_s` every candidate is built and every refinement runs to its
end. `budget_s` (`--time-budget`) is a cap a user sets: candidates not ready when it
ends are skipped and the refinement stops, and report.json says so.
"""

from __future__ import annotations

import math
import time
from concurrent import futures
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field, replace
from typing import NamedTuple

import numpy as np

from pardnn.emulator import lower_bound_us
from pardnn.emulator.trial import emulate
from pardnn.errors import UserError
from pardnn.graph.constraints import allowed_devices
from pardnn.pipeline.judge import Judging, judge, with_memory, without_profile
from pardnn.pipeline.refine_memory import refine_within_memory
from pardnn.pipeline.workers import Inline, peaks_of, ready, workers
from pardnn.placers import registry
from pardnn.placers import step1

MAX_MOVED_SHARE = 0.10      # a winner whose repair moved more is taken only if no other fits
EXTRAS_MAX_NODES = 20_000   # smaller graphs get the EXTRA candidates too
REFINE_GRACE_S = 60.0       # how long past a budget a worker's refinement may finish its batch
RUNNER_UP_MAX_NODES = 400   # smaller graphs: the runner-up is refined even when Step 1 wins as it is


class Candidate(NamedTuple):
    """One candidate after its repair and emulation."""

    device: object               # int32 per node as built, or None when it was not built
    entry: dict                  # its report.json entry under `candidates`
    judged: object               # judge.Judged, or None when it cannot fit
    error: object                # the repair's UserError, or None
    build_s: float
    repair_s: float


SKIPPED = Candidate(None, {"skipped": "time budget spent"}, None, None, 0.0, 0.0)
DIED = Candidate(None, {"feasible": False, "makespan_us": None, "reason": "its worker process died"},
                 None, None, 0.0, 0.0)


@dataclass
class Chosen:
    """The placement the portfolio keeps, and what each candidate did."""

    winner: str
    raw: np.ndarray              # the winner's device per node before the repair
    judged: object               # judge.Judged, refined within memory
    fitted: object               # refine_memory.Fitted, or None when refinement did not run
    step1_output: str | None     # "thesis", "affinity" or "one-device": what Step 1 returned
    candidates: dict = field(default_factory=dict)
    bound_us: float | None = None   # emulator.lower_bound_us, if found while the refinements ran

    def report_fields(self) -> dict:
        """report.json's portfolio fields; none for a portfolio of one."""
        if len(self.candidates) < 2:
            return {}
        fields = {"candidate": self.winner, "step1_output": self.step1_output,
                  "candidates": self.candidates}
        if self.fitted is not None:
            fields["refine_memory"] = {"makespan_after_repair_us": self.fitted.makespan_before_us,
                                       "moved_nodes": self.fitted.refined_nodes,
                                       "batches": self.fitted.batches,
                                       "stopped_by_budget": self.fitted.stopped_by_budget,
                                       "batches_far_behind": self.fitted.far_behind}
        return fields


def build(graph, cluster, name, timings=None) -> np.ndarray:
    """Placer `name`'s placement (int32 per node), lending it the emulator when it
    judges its own trials (registry.Placer.emulates)."""
    lent = {"emulate": emulate} if registry.PLACERS[name].emulates else {}
    return np.asarray(registry.get(name)(graph, cluster, timings, **lent), np.int32)


def candidate_roles(graph, cluster, algorithm) -> tuple:
    """(roles, beside): `algorithm`'s candidates that run here, name -> role in the
    registry's order, and those built beside the FIRST one from the start (the others,
    EXTRA ones on large graphs, run only when none of these fits)."""
    names = registry.candidates(algorithm)
    if len(names) == 1:
        roles = {names[0]: registry.FIRST}      # a portfolio of one: built here, always
    else:
        roles = {name: registry.PLACERS[name].role for name in names
                 if registry.applies(name, graph, cluster)}
    beside = [name for name, role in roles.items() if role == registry.CORE
              or (role == registry.HOSTS and len(cluster.hosts) > 1)
              or (role == registry.EXTRA and graph.num_nodes < EXTRAS_MAX_NODES)]
    return roles, beside


def choose(graph, cluster, algorithm, timings=None, budget_s=None) -> Chosen:
    """Build and judge `algorithm`'s candidates; refine the two fastest within memory."""
    timings = {} if timings is None else timings
    roles, beside = candidate_roles(graph, cluster, algorithm)
    first = [name for name, role in roles.items() if role == registry.FIRST]
    extra = [name for name, role in roles.items() if role == registry.EXTRA]
    beside.sort(key=lambda name: -registry.PLACERS[name].build_rank)      # the slowest first
    judging = Judging(graph, cluster)
    with workers(judging, beside, _candidate, _refined_beside) as pool:
        pending = {name: pool.submit(name) for name in beside}
        results, step1_output = _first(judging, first[0], timings, alone=len(roles) == 1)
        deadline = math.inf if budget_s is None else time.perf_counter() + budget_s    # (after Step 1)
        early, bound = _refine_early(judging, results, pending, list(roles), pool, timings, deadline)
        for name in reversed(beside):           # help with those no worker has started yet
            if pool.claim(name):
                results[name] = _collect(Inline(judging, _candidate, _refined).submit(name), deadline)
        results.update({name: _collect(pending[name], deadline) for name in roles
                        if name in pending and name not in results})
        if all(r.judged is None for r in results.values()):      # nothing fits yet: the rest
            inline = Inline(judging, _candidate, _refined)
            results.update({name: _collect(inline.submit(name), deadline)
                            for name in extra if name not in results})
        ordered = {name: results[name] for name in roles if name in results}
        return _pick(judging, ordered, step1_output, timings, deadline, pool, early, bound)


def _first(judging, name, timings, alone=False):
    """({name: Candidate}, step1_output) for the FIRST candidate, built here with the
    stage timings: Step 1 through `partition`, which says what it returned and gives
    the emulation of its result. `alone`: the portfolio has no other candidate (its
    memory profile is kept: see `_judged`)."""
    graph, cluster = judging.graph, judging.cluster
    if name != "step1":
        return {name: _candidate(judging, name, timings, keep_profile=alone)}, None
    first = step1.partition(graph, cluster, timings, emulate=emulate)
    output = "one-device" if first.one_device else "affinity" if first.affinity else "thesis"
    return {name: _judged(judging, first.device, 0.0, first.schedule, keep_profile=alone)}, output


def _refine_early(judging, results, pending, order, pool, timings, deadline):
    """({name: (Judged, Fitted)}, job): while workers still build candidates, the fastest one
    known so far refined here at once, when the runner-up among those known is Step 1
    as it is (not refined again: `_refinable`), instead of after all candidates are
    in. Only the time depends on what is known when: the refinement is the one `_pick`
    would run, and it is used only if that candidate is still a finalist once all are
    in. Never with a budget. Its peaks before repair come from a worker only when no
    candidate is still queued (a job waits behind those); else they are tracked here.
    The job: a worker's, finding report.json's lower bound once its candidates are
    built (or None)."""
    if deadline != math.inf or not pool.parallel:
        return {}, None
    if all(name in results or job.done() for name, job in pending.items()):
        return {}, None                         # nothing to wait for: `_pick` refines beside a worker
    known = {name: r.judged for name, r in results.items() if r.judged is not None}
    done = {name: _collect(job, deadline) for name, job in pending.items() if name not in results and job.done()}
    known.update({name: r.judged for name, r in done.items() if r.judged is not None})
    finalists = _finalists(known, judging.graph.num_nodes, order) if known else []
    if len(finalists) < 2 or not _refinable(finalists[0], known) or _refinable(finalists[1], known):
        return {}, None
    lead, bound = known[finalists[0]], pool.bound()
    waiting = [name for name, job in pending.items() if name not in results and not job.done()]
    queued = any(not pool.started(name) for name in waiting)
    peaks = None if queued or lead.peak_before is not None else pool.peaks(lead.device)
    t0 = time.perf_counter()
    fitted = _refined(judging, lead, deadline, peaks)
    timings["refine_memory"] = time.perf_counter() - t0
    return {finalists[0]: (lead, fitted)}, bound


def _pick(judging, results, step1_output, timings, deadline, pool, early=None, bound=None) -> Chosen:
    """The faster of the two best candidates once each is refined within memory: the
    first here, the second by a worker beside it (or after it, without workers), as a
    runner-up can refine past the winner (docs/algorithm.md, "Candidates"). When Step 1
    wins without the repair moving anything, nothing is refined: refining the runner-up
    alone would cost time that nothing runs beside; except on graphs of at most
    RUNNER_UP_MAX_NODES nodes, where it costs little. A portfolio of one is not refined.
    `early` holds refinements `_refine_early` ran: {name: (the Judged refined, Fitted)};
    `bound`, a job finding the report's lower bound. Without one, a worker that has no
    refinement to run finds it meanwhile, or this process does while a worker still
    refines (without workers, the report finds it after)."""
    graph, cluster = judging.graph, judging.cluster
    report = {name: r.entry for name, r in results.items()}
    judged = {name: r.judged for name, r in results.items() if r.judged is not None}
    if not judged:
        raise next(r.error for r in results.values() if r.error is not None)
    timings["repair"] = sum(r.repair_s for r in results.values())
    first = next(iter(results))                 # the FIRST candidate: its stages are in timings
    timings.update({name: r.build_s for name, r in results.items() if name != first and r.device is not None})
    finalists = _finalists(judged, graph.num_nodes, list(results))
    refine = len(results) > 1
    if not refine or not (_refinable(finalists[0], judged) or graph.num_nodes <= RUNNER_UP_MAX_NODES):
        finalists = finalists[:1]   # Step 1 won as it is: no refinement for the runner-up to run beside
    refined = [name for name in finalists if refine and _refinable(name, judged)]
    t0 = time.perf_counter()
    fitted = {name: f for name, (j, f) in (early or {}).items() if name in refined and j is judged[name]}
    todo = [name for name in refined if name not in fitted]
    jobs = {name: pool.refine(judged[name], deadline) for name in todo[1:]}
    beside = _peaks_beside(pool, judged, todo, jobs, deadline)
    bound = pool.bound() if bound is None and not jobs and deadline == math.inf else bound
    fitted.update({name: _refined(judging, judged[name], deadline, beside) for name in todo[:1]})
    bound_us = ready(bound)
    if jobs and bound_us is None and deadline == math.inf and pool.parallel:   # while a worker refines
        bound_us = lower_bound_us(graph, cluster)
    fitted.update({name: _collect_refined(job, deadline) for name, job in jobs.items()})
    bound_us = ready(bound) if bound_us is None else bound_us
    if fitted:      # (re-inserted, so that the stages keep their order however early it ran)
        timings["refine_memory"] = timings.pop("refine_memory", 0.0) + time.perf_counter() - t0
    final = {name: fitted[name].judged if fitted.get(name) else judged[name] for name in finalists}
    for name in fitted:
        report[name]["refined_makespan_us"] = final[name].schedule.makespan
    winner = min(finalists, key=lambda n: (final[n].schedule.makespan, finalists.index(n)))
    return Chosen(winner, results[winner].device, with_memory(graph, cluster, final[winner]),
                  fitted.get(winner), step1_output, report, bound_us)


def _refined(judging, judged, deadline, peaks=None):
    """`judged` refined within memory (refine_memory.py), at most K rounds. `peaks`, a
    job giving the emulated peaks of `judged` when it has none yet (it was judged by
    emulation alone: pardnn.pipeline.workers), stands in for tracking them here: they
    are the result's peaks before repair, unless refinement kept nothing and tracked
    them itself."""
    graph, cluster = judging.graph, judging.cluster
    if peaks is None and judged.peak_before is None:
        judged = with_memory(graph, cluster, judged)
    fitted = refine_within_memory(graph, cluster, judged, allowed_devices(graph, cluster),
                                  rounds=cluster.num_devices, deadline=deadline, judging=judging)
    result = fitted.judged
    if result.peak_before is None:
        same = np.array_equal(result.device, judged.device)
        before = result.profile.peak_bytes if same else _peaks_of(peaks, judging, judged)
        fitted = replace(fitted, judged=replace(result, peak_before=before.copy()))
    return fitted


def _refined_beside(judging, judged, deadline):
    """`_refined` as the runner-up's job runs it (in a worker, where there are any):
    its result without the memory profile, which costs more to send back than to track
    again in the rare case that it wins (`without_profile`)."""
    fitted = _refined(judging, judged, deadline)
    return replace(fitted, judged=without_profile(fitted.judged))


def _peaks_beside(pool, judged, refined, jobs, deadline):
    """A worker's job tracking the peaks of the one candidate to refine, when it has no
    peaks yet (judged by emulation alone), no runner-up is refined beside it, and no
    budget is set (a worker may still be busy with a skipped candidate then); else None."""
    if refined and not jobs and judged[refined[0]].peak_before is None and deadline == math.inf:
        return pool.peaks(judged[refined[0]].device)
    return None


def _peaks_of(job, judging, judged):
    """The peaks job's answer; tracked here if its worker died or failed."""
    try:
        return job.result(timeout=None)
    except Exception:       # any failure only means: track them here
        return peaks_of(judged.device, judging)


def _refinable(name, judged) -> bool:
    """Step 1 refined itself, so it is refined again only when its repair moved nodes."""
    return name != "step1" or judged[name].rounds > 0


def _finalists(judged, num_nodes, order) -> list:
    """The two fastest feasible candidates (the earlier in `order` on ties), among those
    whose repair moved at most MAX_MOVED_SHARE of the nodes when there are any."""
    few = [n for n, r in judged.items() if r.moved.sum() <= MAX_MOVED_SHARE * num_nodes]
    return sorted(few or judged, key=lambda n: (judged[n].schedule.makespan, order.index(n)))[:2]


def _candidate(judging, name, timings=None, keep_profile=False):
    """Build candidate `name` and judge it (runs in a worker process when there are any)."""
    t0 = time.perf_counter()
    device = build(judging.graph, judging.cluster, name, timings)
    return _judged(judging, device, time.perf_counter() - t0, keep_profile=keep_profile)


def _judged(judging, device, build_s, schedule=None, keep_profile=False) -> Candidate:
    """The candidate `device` judged (`schedule`: its emulation, if known), without its
    memory profile unless `keep_profile`: candidates wait for the others, and cross
    between processes, without it, and only the finalists track it again."""
    t0 = time.perf_counter()
    try:
        fixed, error = judge(judging.graph, judging.cluster, device, schedule, judging), None
        fixed = fixed if keep_profile else without_profile(fixed)
    except UserError as exc:
        fixed, error = None, exc
    repair_s = time.perf_counter() - t0
    entry = ({"feasible": False, "makespan_us": None, "reason": str(error)} if fixed is None else
             {"feasible": True, "makespan_us": fixed.schedule.makespan, "moved_nodes": int(fixed.moved.sum())})
    entry["seconds"] = build_s + repair_s
    return Candidate(device, entry, fixed, error, build_s, repair_s)


def _left(deadline, grace=0.0):
    """Seconds to wait for a job: None (no limit) without a budget."""
    return None if deadline == math.inf else max(deadline - time.perf_counter(), 0.0) + grace


def _collect(job, deadline):
    """A candidate's result; a skipped entry when the budget has ended before it was
    done (with or without workers alike), a failed one when its worker process died."""
    remaining = _left(deadline)
    try:
        if remaining is not None and remaining <= 0 and not getattr(job, "done", lambda: False)():
            raise futures.TimeoutError
        return job.result(timeout=remaining)
    except futures.TimeoutError:
        return SKIPPED._replace(entry=dict(SKIPPED.entry))
    except BrokenProcessPool:
        return DIED._replace(entry=dict(DIED.entry))


def _collect_refined(job, deadline):
    """A worker's refinement (it stops itself at the deadline), or None if it died."""
    try:
        return job.result(timeout=_left(deadline, REFINE_GRACE_S))
    except (futures.TimeoutError, BrokenProcessPool):
        return None

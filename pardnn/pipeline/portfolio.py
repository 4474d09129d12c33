"""The portfolio's executor: it builds an algorithm's candidates, judges each once
(repair, then emulation: judge.py), refines the finalists within memory
(refine_memory.py) and keeps the faster, running each job where and when it can.
What runs, what is tried again when nothing fits and what is kept are the rules of
pardnn.pipeline.choice, pure functions of the judged results; this module decides only
where jobs run and how long it waits. It names no candidate: how one is built comes
from its registry entry (pardnn.placers.registry).

Vocabulary: a candidate is *built* (its placer's placement), *judged* once (a
judge.Judged, or why it cannot fit), and, as a finalist, *refined* (a
refine_memory.Refinement). A plain `--algorithm etf` is a portfolio of one, judged the
same way, neither refined nor reported as candidates.

Where: on graphs of workers.PARALLEL_MIN_NODES or more, the candidates after the first
are built and judged in worker processes (pardnn.pipeline.workers) while the first runs
here; a finalist is refined here while a worker refines the other, tracks the peaks the
report needs, or finds report.json's lower bound. When the first candidate is done and
choice.refine_first names one of those judged so far, it is refined at once,
before the rest are in (`_refine_early`); that refinement is used only if the rules
still ask for it once all are in, so only the time depends on what was known when.

When: with no `budget_s` every candidate is built and every refinement runs to its end,
and the answer never depends on a clock. `budget_s` (`--time-budget`, counted from the
end of the first candidate) is a cap a user sets: candidates not ready when it ends are
skipped, the refinement stops, and report.json says so.
"""

from __future__ import annotations

import math
import time
from concurrent import futures
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field, replace
from typing import NamedTuple

import numpy as np

from pardnn.pipeline.bounds import step_lower_bound
from pardnn.emulator.trial import emulate
from pardnn.base.errors import UserError
from pardnn.graph.constraints import allowed_devices
from pardnn.pipeline import choice
from pardnn.pipeline.judge import Judging, judge, with_memory, without_profile
from pardnn.pipeline.refine_memory import refine_within_memory
from pardnn.pipeline.workers import Inline, peaks_of, ready, workers
from pardnn.placers import registry

REFINE_GRACE_S = 60.0       # how long past a budget a worker's refinement may finish its batch


class Candidate(NamedTuple):
    """One candidate, built and judged."""

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
    raw: np.ndarray              # the winner's device per node as built, before its repair
    judged: object               # judge.Judged of the placement kept (refined, if it was)
    refinement: object           # refine_memory.Refinement of the winner, or None when it was not refined
    step1_output: str | None     # "thesis", "affinity" or "one-device": what Step 1 returned
    candidates: dict = field(default_factory=dict)   # name -> report.json entry, in registry order
    step_bound: object = None   # bounds.StepLowerBound without the exact model, if found while the refinements ran


@dataclass
class _Run:
    """What the jobs of one portfolio run share."""

    judging: Judging
    pool: object                 # workers.Forked, or workers.Inline
    deadline: float              # time.perf_counter() seconds; inf without a budget
    timings: dict                # stage -> seconds, for report.json


def build(graph, cluster, name, timings=None) -> np.ndarray:
    """Placer `name`'s placement (int32 per node), lending it the emulator when it
    judges its own trials (registry.Placer.emulates); made once per graph and devices,
    whatever their memory, for a placer that reads no memory (`_once`), through its
    `detailed` function when it has one (`_detailed`)."""
    lent = {"emulate": emulate} if registry.PLACERS[name].emulates else {}

    def made(spent):
        return np.asarray(registry.run(name, graph, cluster, spent, **lent), np.int32)
    if registry.PLACERS[name].reads_memory:
        return made(timings)
    if _has_details(name, cluster):         # (registry.run gives the same device)
        return _detailed(graph, cluster, name, timings).device.copy()
    return _once(graph, cluster, ("placement", name), timings, made).copy()


def _has_details(name, cluster) -> bool:
    """Whether placer `name` is built through its registry `detailed` function (Step 1's
    partition, which also gives its emulation and what it returned): on devices at rate
    1, where registry.run calls its place function as it is."""
    return registry.PLACERS[name].detailed is not None and cluster.uniform


def _detailed(graph, cluster, name, timings):
    """Placer `name`'s `detailed` function's answer (registry.Placer.detailed), made
    once per graph and devices (`_once`): it reads no memory."""
    details = registry.detailed(name)
    return _once(graph, cluster, ("details", name), timings,
                 lambda spent: details(graph, cluster, spent, emulate=emulate))


def _once(graph, cluster, what, timings, make):
    """make(timings), made once per graph and `what` on devices like `cluster`'s whatever
    their memory and reserve (the graph's memo): for a placer that reads no memory
    (registry.Placer.reads_memory), whose placement is the same at any memory, and which
    `pardnn capacity` asks for at many. The stage timings it recorded when made go into
    `timings` each time."""
    def made():
        spent = {}
        return make(spent), spent
    key = (what, tuple(replace(d, memory=0) for d in cluster.devices), cluster.latency_us.tobytes(),
           cluster.bandwidth.tobytes(), cluster.hosts, cluster.preset)
    value, spent = graph.memoized(key, made)
    if timings is not None:
        timings.update(spent)
    return value


@dataclass
class Judgements:
    """The candidates `choose` builds from the start (choice.roles: the first and those
    beside it), built and judged at one cluster by `judge_all`: `choose` at that same
    cluster object takes them as they are instead of building them again
    (`pardnn capacity` checks a memory with them, then places there: pardnn.pipeline.capacity)."""

    cluster: object
    candidates: dict             # name -> Candidate
    step1_output: str | None
    timings: dict                # the first candidate's stages, as `choose` records them


def judge_all(graph, cluster, algorithm) -> Judgements:
    """`algorithm`'s candidates built and judged as `choose` builds and judges them
    (the first here, the others in worker processes on large graphs), and no more."""
    roles = choice.roles(algorithm, graph, cluster)
    judging, timings = Judging(graph, cluster), {}
    with workers(judging, roles.beside, _build_and_judge, _refine_in_worker) as pool:
        pending = {name: pool.submit(name) for name in roles.beside}
        results, step1_output = _first(judging, roles.first, timings, alone=len(roles.order) == 1)
        results.update(_collect_beside(_Run(judging, pool, math.inf, timings), roles, results, pending))
    return Judgements(cluster, {name: results[name] for name in roles.order if name in results}, step1_output,
                      timings)


def choose(graph, cluster, algorithm, timings=None, budget_s=None, judged=None) -> Chosen:
    """Build and judge `algorithm`'s candidates; refine the finalists; keep the faster.
    `judged`: Judgements of this cluster (`judge_all`), taken instead of building them."""
    timings = {} if timings is None else timings
    roles = choice.roles(algorithm, graph, cluster)
    judging = Judging(graph, cluster)
    if judged is not None and judged.cluster is not cluster:
        raise ValueError("choose: the Judgements given were made at another cluster")
    with workers(judging, roles.beside, _build_and_judge, _refine_in_worker) as pool:
        if judged is None:
            pending = {name: pool.submit(name) for name in roles.beside}
            results, step1_output = _first(judging, roles.first, timings, alone=len(roles.order) == 1)
        else:
            pending, results, step1_output = {}, dict(judged.candidates), judged.step1_output
            timings.update(judged.timings)
        deadline = math.inf if budget_s is None else time.perf_counter() + budget_s    # (after Step 1)
        run = _Run(judging, pool, deadline, timings)
        early, bound = _refine_early(run, results, pending, roles.order)
        results.update(_collect_all(run, roles, results, pending))
        ordered = {name: results[name] for name in roles.order if name in results}
        return _pick(run, ordered, step1_output, early, bound)


def _collect_all(run, roles, results, pending) -> dict:
    """Every candidate besides the first (`_collect_beside`), then those the rules ask
    for when none fits: the EXTRA ones not built yet (choice.fallback_extras), built
    here, then the closest judged again with the repair's local search (`searched`)."""
    found = _collect_beside(run, roles, results, pending)
    extras = choice.fallback_extras(_fits({**results, **found}), roles)
    inline = _inline(run.judging)
    found.update({name: _collect(inline.submit(name), run.deadline) for name in extras})
    found.update(searched(run.judging, {**results, **found}))
    return found


def _fits(results) -> dict:
    """{name: whether its repair fit it} of `results` ({name: Candidate})."""
    return {name: r.judged is not None for name, r in results.items()}


def _collect_beside(run, roles, results, pending) -> dict:
    """The candidates beside the first not in `results`: those no worker has started
    yet built here (the quick ones, last in `beside`), the rest collected from the
    workers."""
    found = {}
    for name in reversed(roles.beside):
        if name not in results and run.pool.claim(name):
            found[name] = _collect(_inline(run.judging).submit(name), run.deadline)
    found.update({name: _collect(pending[name], run.deadline) for name in roles.order
                  if name in pending and name not in results and name not in found})
    return found


def searched(judging, results) -> dict:
    """What the portfolio tries last ({name: Candidate}): the candidates of `results`
    that choice.next_search names in turn, judged again with the repair's local search
    (docs/repair.md), from their placements as built."""
    searching = Judging(judging.graph, judging.cluster, search=True)
    errors = {name: r.error for name, r in results.items() if r.device is not None}
    found = {}
    while (name := choice.next_search(_fits({**results, **found}), errors, found)) is not None:
        found[name] = _judge_candidate(searching, results[name].device, results[name].build_s)
    return found


def _inline(judging) -> Inline:
    return Inline(judging, _build_and_judge, _refine)


def _first(judging, name, timings, alone=False):
    """({name: Candidate}, step1_output) for the first candidate, built here with the
    stage timings: through its `detailed` function where it has one (Step 1's
    partition), which says what it returned (step1_output) and gives the emulation of
    its result. `alone`: the portfolio has no other candidate (its memory profile is
    kept: see `_judge_candidate`)."""
    graph, cluster = judging.graph, judging.cluster
    if not _has_details(name, cluster):     # (devices with rates: on the fastest ones, registry.run)
        return {name: _build_and_judge(judging, name, timings, keep_profile=alone)}, None
    first = _detailed(graph, cluster, name, timings)
    return {name: _judge_candidate(judging, first.device, 0.0, first.schedule, keep_profile=alone)}, first.output


def _refine_early(run, results, pending, order):
    """({name: (Judged, Refinement)}, job) when choice.refine_first names a candidate
    among those judged so far while workers still build others: that candidate refined
    here at once. Never with a budget, nor without workers. Its peaks before repair come
    from a worker only when no candidate is still queued (a job waits behind those);
    else they are tracked here. The job: a worker's, finding report.json's lower bound
    once its candidates are built (or None)."""
    pool, graph = run.pool, run.judging.graph
    if run.deadline != math.inf or not pool.parallel:
        return {}, None
    if all(name in results or job.done() for name, job in pending.items()):
        return {}, None                         # nothing to wait for: `_pick` refines beside a worker
    known = {name: r.judged for name, r in results.items() if r.judged is not None}
    done = {name: _collect(job, run.deadline) for name, job in pending.items()
            if name not in results and job.done()}
    known.update({name: r.judged for name, r in done.items() if r.judged is not None})
    lead = choice.refine_first({n: choice.Judgement.of(j, run.judging.cluster) for n, j in known.items()},
                               graph.num_nodes, order)
    if lead is None:
        return {}, None
    bound = pool.bound()
    waiting = [name for name, job in pending.items() if name not in results and not job.done()]
    queued = any(not pool.started(name) for name in waiting)
    peaks = None if queued or known[lead].peak_before is not None else pool.peaks(known[lead].device)
    t0 = time.perf_counter()
    refinement = _refine(run.judging, known[lead], run.deadline, peaks)
    run.timings["refine_memory"] = time.perf_counter() - t0
    return {lead: (known[lead], refinement)}, bound


def _pick(run, results, step1_output, early=None, bound=None) -> Chosen:
    """The candidate kept: choice.refinements names the finalists and which to refine,
    they are refined (`early` holds those `_refine_early` refined already:
    {name: (the Judged refined, Refinement)}), and choice.winner takes the faster.
    `bound`: a job finding the report's lower bound, if one was started."""
    judged = {name: r.judged for name, r in results.items() if r.judged is not None}
    if not judged:
        raise next(r.error for r in results.values() if r.error is not None)
    run.timings["repair"] = sum(r.repair_s for r in results.values())
    first = next(iter(results))                 # the first candidate: its stages are in timings
    run.timings.update({name: r.build_s for name, r in results.items() if name != first and r.device is not None})
    plan = choice.refinements({n: choice.Judgement.of(j, run.judging.cluster) for n, j in judged.items()},
                              run.judging.graph.num_nodes, list(results))
    refined, step_bound = _refine_finalists(run, judged, plan.refine, early or {}, bound)
    final = {name: refined[name].judged if refined.get(name) else judged[name] for name in plan.finalists}
    report = {name: r.entry for name, r in results.items()}
    for name in refined:
        report[name]["refined_makespan_us"] = final[name].schedule.makespan
    winner = choice.winner({name: final[name].schedule.makespan for name in plan.finalists}, plan.finalists)
    graph, cluster = run.judging.graph, run.judging.cluster
    return Chosen(winner, results[winner].device, with_memory(graph, cluster, final[winner]),
                  refined.get(winner), step1_output, report, step_bound)


def _refine_finalists(run, judged, names, early, bound):
    """({name: Refinement or None}, the lower bound if found): `names` refined within
    memory, the first here and the second by a worker beside it (here after it, without
    workers), reusing `early`'s when it refined the same Judged. Meanwhile an idle worker
    tracks the peaks the first one lacks, or finds the lower bound; else this process
    finds it while a worker refines (without workers, the report finds it after)."""
    pool, deadline, graph, cluster = run.pool, run.deadline, run.judging.graph, run.judging.cluster
    t0 = time.perf_counter()
    refined = {name: r for name, (j, r) in early.items() if name in names and j is judged[name]}
    todo = [name for name in names if name not in refined]
    jobs = {name: pool.refine(judged[name], deadline) for name in todo[1:]}
    peaks = _peaks_beside(pool, judged, todo, jobs, deadline)
    bound = pool.bound() if bound is None and not jobs and deadline == math.inf else bound
    refined.update({name: _refine(run.judging, judged[name], deadline, peaks) for name in todo[:1]})
    step_bound = ready(bound)
    if jobs and step_bound is None and deadline == math.inf and pool.parallel:   # while a worker refines
        step_bound = step_lower_bound(graph, cluster, exact_model=False)
    refined.update({name: _collect_refined(job, deadline) for name, job in jobs.items()})
    step_bound = ready(bound) if step_bound is None else step_bound
    if refined:     # (re-inserted, so that the stages keep their order however early it ran)
        run.timings["refine_memory"] = run.timings.pop("refine_memory", 0.0) + time.perf_counter() - t0
    return refined, step_bound


def _refine(judging, judged, deadline, peaks=None):
    """`judged` refined within memory (refine_memory.py), at most K rounds. `peaks`, a
    job giving the emulated peaks of `judged` when it has none yet (it was judged by
    emulation alone: pardnn.pipeline.workers), stands in for tracking them here: they
    are the result's peaks before repair, unless refinement kept nothing and tracked
    them itself."""
    graph, cluster = judging.graph, judging.cluster
    if peaks is None and judged.peak_before is None:
        judged = with_memory(graph, cluster, judged)
    refinement = refine_within_memory(graph, cluster, judged, allowed_devices(graph, cluster),
                                      rounds=cluster.num_devices, deadline=deadline, judging=judging)
    result = refinement.judged
    if result.peak_before is None:
        same = np.array_equal(result.device, judged.device)
        before = result.profile.peak_bytes if same else _peaks_of(peaks, judging, judged)
        refinement = replace(refinement, judged=replace(result, peak_before=before.copy()))
    return refinement


def _refine_in_worker(judging, judged, deadline):
    """`_refine` as a worker runs it: its result without the memory profile, which costs
    more to send back than to track again in the rare case that it wins (`without_profile`)."""
    refinement = _refine(judging, judged, deadline)
    return replace(refinement, judged=without_profile(refinement.judged))


def _peaks_beside(pool, judged, names, jobs, deadline):
    """A worker's job tracking the peaks of the one candidate to refine, when it has no
    peaks yet (judged by emulation alone), no other is refined beside it, and no budget
    is set (a worker may still be busy with a skipped candidate then); else None."""
    if names and not jobs and judged[names[0]].peak_before is None and deadline == math.inf:
        return pool.peaks(judged[names[0]].device)
    return None


def _peaks_of(job, judging, judged):
    """The peaks job's answer; tracked here if its worker died or failed."""
    try:
        return job.result(timeout=None)
    except Exception:       # any failure only means: track them here
        return peaks_of(judged.device, judging)


def _build_and_judge(judging, name, timings=None, keep_profile=False) -> Candidate:
    """Build candidate `name` and judge it (in a worker process when there are any)."""
    t0 = time.perf_counter()
    device = build(judging.graph, judging.cluster, name, timings)
    return _judge_candidate(judging, device, time.perf_counter() - t0, keep_profile=keep_profile)


def _judge_candidate(judging, device, build_s, schedule=None, keep_profile=False) -> Candidate:
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


def _collect(job, deadline) -> Candidate:
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

"""Refinement within memory, a pipeline stage after the judge: run Step 1's refinement
moves again (pardnn.placers.step1_phases.refinement) on a repaired placement, keeping a batch
only if the placement, judged again (repaired, then emulated), is faster and fits.
Not in the thesis.

Why: Step 1 ignores memory, so on a model whose critical path holds most of the
activations it puts nearly all of them on one device (e3d at K = 8: about 3x that
device's capacity at 0.3x memory). The repair then has to move much of the critical
path, and each move is chosen for memory (Eq. 4.5's cost per byte), not for the step
time: the moved ops queue behind other work on their new devices, and the repaired
step was 1.3x the unconstrained one. Step 1's moves fix exactly that, but almost
every batch of them overflows a device again by a little; so each batch is repaired
before it is judged (`judged_by_repair`), and the moves and the repair together are
kept when the repaired step is faster than the current one. A batch that no device's
memory could overflow (`fits_surely`) is only emulated, its memory tracked if it is kept.

Rounds follow pardnn.placers.step1_phases.refinement (its move finders, batches and stop rule), at
most K of them; every kept batch strictly shortens the emulated step of a placement
that fits, so the result is never slower than the repair alone, and it always fits.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace

from pardnn.emulator.scheduler import simulate
from pardnn.base.errors import UserError
from pardnn.pipeline.judge import Judged, Judging, judge, with_memory, without_profile
from pardnn.placers.step1_phases.refinement import move_rounds

HOPELESS_SLACK = 0.02   # a trial this much slower than the step to beat before its repair is not repaired


@dataclass(frozen=True)
class Refinement:
    """A judged placement refined within memory (repaired again), and what it took."""

    judged: Judged              # the result; `moved`: nodes any repair moved, `rounds`: all repairs'
    makespan_before_us: float   # emulated step of the first repair's placement
    refined_nodes: int          # nodes moved by the kept batches of refinement moves
    batches: int                # batches kept
    stopped_by_budget: bool     # the deadline ended it before a round gained too little
    far_behind: int             # batches rejected unrepaired (HOPELESS_SLACK behind)


def refine_within_memory(graph, cluster, fixed: Judged, allowed, rounds: int,
                         deadline: float = math.inf, judging=None) -> Refinement:
    """Refine the repaired placement `fixed` under the cluster's capacities, stopping
    at `deadline` (time.perf_counter() seconds) between batches; `judging`, the
    pardnn.pipeline.judge.Judging to share (else a new one)."""
    moved = fixed.moved.copy()
    tally = {"nodes": 0, "batches": 0, "rounds": 0, "far_behind": 0}

    def kept(finder, judged, nodes):
        moved[:] |= judged.moved
        tally["nodes"] += nodes
        tally["batches"] += 1
        tally["rounds"] += judged.rounds
    judge_trial = _until(deadline, judged_by_repair(graph, cluster, judging, tally))
    _, current, late = move_rounds(graph, cluster, fixed.device, fixed, allowed, judge_trial, rounds, kept,
                                   late=lambda: time.perf_counter() > deadline)
    current = with_memory(graph, cluster, current)     # kept by emulation alone: its memory, once
    result = replace(current, moved=moved, peak_before=fixed.peak_before,
                     rounds=fixed.rounds + tally["rounds"])
    return Refinement(result, fixed.schedule.makespan, tally["nodes"], tally["batches"], late,
                  tally["far_behind"])


def _until(deadline, judged):
    """The refinement judge `judged`, refusing every trial once `deadline` has passed, so
    that no batch starts after it."""
    def bounded(trial, beat):
        return None if time.perf_counter() > deadline else judged(trial, beat)
    return bounded


def judged_by_repair(graph, cluster, judging=None, tally=None):
    """A refinement judge (pardnn.placers.step1_phases.refinement.first_improving) that repairs the
    trial first: (repaired device, its makespan, the Judged without its memory profile,
    which refine_within_memory tracks again for the one it keeps last), or None when the trial
    cannot be repaired, or when its emulated step before any repair is more than
    HOPELESS_SLACK longer than the step `beat` it must beat (counted in
    `tally["far_behind"]` when a tally is given).

    That rule is a measured choice, not a bound: the repair may move the trial anywhere,
    and it has shortened a trial's step by up to 4.5%; but of 1,419 trials measured (514
    winners) no trial more than 1.56% behind before its repair won after it, while the
    trials 2-2.5% behind (the communication moves' largest batches with memory short)
    cost a third of this refinement on the largest graphs (docs/repair.md, "Refinement
    within memory").

    A trial that no device's memory can overflow (`fits_surely`) needs no repair and is
    only emulated (pardnn.pipeline.judge's `fits`): its Judged has no memory profile
    (None) until refine_within_memory tracks the one it keeps. With memory to spare, that
    saves tracking the memory of every trial, with the same decisions."""
    judging = Judging(graph, cluster) if judging is None else judging

    def judged(trial, beat=None):
        schedule = simulate(graph, cluster, trial)
        if beat is not None and schedule.makespan > beat * (1.0 + HOPELESS_SLACK):
            if tally is not None:
                tally["far_behind"] += 1
            return None
        try:
            fixed = judge(graph, cluster, trial, schedule, judging=judging)
        except UserError:
            return None
        return fixed.device, fixed.schedule.makespan, without_profile(fixed)
    return judged

"""The portfolio's rules: which candidates are built, which are tried again when none
fits, which of them are refined within memory, and which placement is kept. Pure
functions of the graph's size, the cluster's hosts, the registry and the candidates'
judged results: no worker pool, no clock, no I/O, so the answer cannot depend on a
machine's speed. pardnn.pipeline.portfolio runs the jobs these rules ask for (where,
and under a `--time-budget`), and decides nothing else.

No single method wins everywhere (docs/algorithm.md, "Candidates"): `--algorithm pardnn`
builds ParDNN's Step 1 (the FIRST candidate), the CORE ones (HOSTS too on clusters of
several hosts) and, on graphs under EXTRAS_MAX_NODES or when no other candidate fits,
the EXTRA ones; a candidate whose registry entry has an `applies` test runs only where it
passes. Each candidate is built, judged once (repaired, then emulated:
pardnn.pipeline.judge); when none fits, the EXTRA ones not built yet are
(`fallback_extras`), and when none fits still, the SEARCHED closest are judged again
with the repair's local search (`next_search`). The two fastest feasible ones, the
finalists, are refined within memory (pardnn.pipeline.refine_memory); the faster
refined one is kept. Step 1 is named by its registry fields, never by its name: its
role (FIRST) and `refines_itself`.
"""

from __future__ import annotations

import hashlib
from typing import NamedTuple

import numpy as np

from pardnn.placers import registry
from pardnn.repair.overflow_repair import Stuck

MAX_MOVED_SHARE = 0.10      # a finalist whose repair moved more is taken only if no other fits
EXTRAS_MAX_NODES = 20_000   # smaller graphs get the EXTRA candidates too
RUNNER_UP_MAX_NODES = 400   # smaller graphs: the runner-up is refined even when Step 1 wins as it is
SEARCHED = 2                # candidates the repair's local search tries, when none fits without it


class Roles(NamedTuple):
    """Which candidates run, and how."""

    order: list     # every candidate that may run, in the registry's order (the earlier wins a tie)
    first: str      # built first, in the pipeline's own process (Step 1, or a portfolio of one's placer)
    beside: list    # built while the first one is, by worker processes where there are any, slowest first
    extra: list     # built after all, if none of the others fits


# The stage partition's two folds (pardnn/placers/stages.py): which refines to the faster
# step varies by graph (docs/algorithm.md, "Candidates"), and the two often judge within
# 0.1% of each other, so they take one finalist's place and, when one is a finalist, the
# other is refined beside it: one refinement more, for a step no slower than either's.
FOLDS = ("stages", "stages-live")


class Judgement(NamedTuple):
    """What the rules read of one judged candidate (pardnn.pipeline.judge.Judged)."""

    makespan_us: float      # its emulated step after the repair
    moved_nodes: int        # nodes the repair moved
    repair_rounds: int      # repair rounds (0: it fit as built)
    fastest_only: bool = True   # it uses the cluster's fastest devices alone (not the host beside GPUs)
    digest: str = ""            # its placement's fingerprint: two candidates that place alike are one finalist

    @classmethod
    def of(cls, judged, cluster=None) -> "Judgement":
        """`judged`'s judgement; with `cluster`, whether it leaves the slower devices out."""
        alone = cluster is None or not cluster.mixed or not cluster.tiers[judged.device].any()
        digest = hashlib.sha1(np.ascontiguousarray(judged.device, np.int32).tobytes()).hexdigest()
        return cls(judged.schedule.makespan, int(judged.moved.sum()), judged.rounds, bool(alone), digest)


class Refinements(NamedTuple):
    """The finalists of the judged candidates, and which of them to refine."""

    finalists: list     # at most two names, the faster first
    refine: list        # the finalists refined within memory, in that order


def roles(algorithm: str, graph, cluster) -> Roles:
    """The candidates of `algorithm` on this graph and cluster (registry.PLACERS' roles)."""
    names = registry.candidates(algorithm)
    if len(names) == 1:
        role = {names[0]: registry.FIRST}       # a portfolio of one: built here, always
    else:
        role = {name: registry.PLACERS[name].role for name in names if registry.applies(name, graph, cluster)}
    first = next(name for name, r in role.items() if r == registry.FIRST)
    extra = [name for name, r in role.items() if r == registry.EXTRA]
    beside = [name for name, r in role.items() if r == registry.CORE
              or (r == registry.HOSTS and len(cluster.hosts) > 1)
              or (r == registry.EXTRA and graph.num_nodes < EXTRAS_MAX_NODES)]
    beside.sort(key=lambda name: -registry.PLACERS[name].build_rank)
    return Roles(list(role), first, beside, extra)


def fallback_extras(fits: dict, roles: Roles) -> list:
    """The EXTRA candidates to build after all the others, when none of them fits
    (`fits`: name -> whether its repair fit it, for every candidate built or skipped so
    far): those not built yet, in order (on graphs of EXTRAS_MAX_NODES nodes or more,
    each a long repair that rarely fits there)."""
    return [] if any(fits.values()) else [name for name in roles.extra if name not in fits]


def next_search(fits: dict, errors: dict, searched) -> str | None:
    """The candidate to judge again with the repair's local search (docs/repair.md), or
    None: while none of `fits` fits (name -> whether it fits, the searched ones as
    searched), the next of the `closest_stuck` of `errors` (name -> its repair's error,
    None when it fit or was not built) not in `searched`; so they are tried in turn
    until one fits, and a placement that fit without the search is never searched."""
    if any(fits.values()):
        return None
    return next((name for name in closest_stuck(errors) if name not in searched), None)


def closest_stuck(errors: dict) -> list:
    """The SEARCHED names of `errors` ({name: the repair's error}, in order) whose repair
    stopped the fewest bytes over capacity (overflow_repair.Stuck), the earlier on ties."""
    stuck = [(e.overflow, i, name) for i, (name, e) in enumerate(errors.items()) if isinstance(e, Stuck)]
    return [name for _, _, name in sorted(stuck)[:SEARCHED]]


def finalists(judged: dict, num_nodes: int, order: list) -> list:
    """The two fastest of `judged` ({name: Judgement}; the earlier in `order` on ties),
    among those whose repair moved at most MAX_MOVED_SHARE of the nodes when there are any,
    the stage partition's two FOLDS counting as one; when a fold is a finalist, the other
    fold too, if it is among them. On devices of different speeds (the host beside GPUs),
    the second is the fastest that uses the fastest devices alone when one fits there, so
    that the placement kept uses the host only where that makes the refined step faster."""
    few = [n for n, j in judged.items() if j.moved_nodes <= MAX_MOVED_SHARE * num_nodes]
    ranked = _distinct(sorted(few or judged, key=lambda n: (judged[n].makespan_us, order.index(n))), judged)
    top = _two_placers(ranked)
    alone = [n for n in ranked if judged[n].fastest_only]
    if alone and alone[0] not in top:
        top = [top[0], alone[0]]
    other_fold = [n for n in ranked if n in FOLDS and n not in top]
    return top + other_fold[:1] if any(n in FOLDS for n in top) else top


def _two_placers(ranked) -> list:
    """The first two of `ranked`, a second fold of the stage partition skipped."""
    top = []
    for name in ranked:
        if len(top) == 2:
            break
        if not (name in FOLDS and any(n in FOLDS for n in top)):
            top.append(name)
    return top


def _distinct(ranked, judged) -> list:
    """`ranked` without the names whose placement an earlier one has (the stage partition's
    two folds often cut alike): refining one placement twice would crowd out another."""
    seen, kept = set(), []
    for name in ranked:
        digest = judged[name].digest
        if not digest or digest not in seen:
            kept.append(name)
            seen.add(digest)
    return kept


def refinable(name: str, judgement: Judgement) -> bool:
    """Whether to refine candidate `name` as a finalist: a placer that refines its own
    placement (registry.Placer.refines_itself: Step 1) is refined again only when its
    repair moved nodes."""
    return not registry.PLACERS[name].refines_itself or judgement.repair_rounds > 0


def refinements(judged: dict, num_nodes: int, order: list) -> Refinements:
    """The finalists and the ones to refine. A portfolio of one refines nothing. When
    Step 1 (a placer that refines itself) wins as it is (nothing repaired), refining
    the runner-up alone would cost time that nothing runs beside, so the runner-up is
    dropped, except on graphs of at most RUNNER_UP_MAX_NODES nodes, where it costs
    little and may refine past it."""
    final = finalists(judged, num_nodes, order)
    portfolio = len(order) > 1
    if not portfolio or not (refinable(final[0], judged[final[0]]) or num_nodes <= RUNNER_UP_MAX_NODES):
        final = final[:1]
    return Refinements(final, [name for name in final if portfolio and refinable(name, judged[name])])


def refine_first(known: dict, num_nodes: int, order: list):
    """The candidate worth refining before all are judged, or None: the fastest of those
    judged so far when the runner-up among them is not refined again (`refinable`:
    Step 1 as it is). Its refinement is the one `refinements` will ask for if it is
    still a finalist once all are in; only when it runs can depend on which are in."""
    final = finalists(known, num_nodes, order) if known else []
    if len(final) < 2 or not refinable(final[0], known[final[0]]) or refinable(final[1], known[final[1]]):
        return None
    return final[0]


def winner(makespans: dict, final: list) -> str:
    """The finalist with the shortest step after refinement ({name: makespan_us}); the
    faster before refinement on a tie."""
    return min(final, key=lambda name: (makespans[name], final.index(name)))

"""Orchestrates a placement: the portfolio of the chosen algorithm (its candidates built,
each repaired for memory and judged, the finalists refined within memory:
pardnn.pipeline.portfolio), checked against the placement rules, then its report
(pardnn.pipeline.report).

Every placement is judged the same way, by the emulator (pardnn.emulator), whose fields
`pardnn emulate` reproduces exactly, after the memory repair (pardnn.repair, thesis
§4.1.2) against cluster.capacity (memory minus the reserve): it moves colocation groups
until every device fits, or raises UserError saying why it cannot. A plain algorithm
is a portfolio of one. placement_seconds is the placers' time plus the repairs' and
the refinement's; assembling the report is stage_seconds["evaluate"].
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace

import numpy as np

from pardnn.base.errors import UserError
from pardnn.graph.constraints import violations
from pardnn.io.placement import Placement
from pardnn.pipeline.portfolio import Chosen, choose
from pardnn.pipeline.order_lever import on_graph, ordered_graphs
from pardnn.pipeline.recompute import recomputations
from pardnn.pipeline.report import Report, placement_report
from pardnn.repair.least_memory import least_memory_on
from pardnn.pipeline.schedule import carry_order, micro_batches
from pardnn.placers import registry


@dataclass(frozen=True)
class Placed:
    """A placement made, before its report: what the portfolio chose, and how long it took."""

    placement: Placement        # the kept placement, its emulation and the stages' wall times
    chosen: Chosen
    seconds: float              # placement_seconds
    scheduled: list = field(default_factory=list)   # each order tried on a micro-batched step
    micro_batches: int = 0      # how many micro-batches the step holds (0: not split)
    graph: object = None        # the CostGraph placed: the one given, or the one a lever made
    recomputation: object = None    # the recomputation placed with (pardnn.pipeline.recompute), or None


def run_placement(graph, cluster, algorithm="pardnn", budget_s=None, judged=None, schedule="auto",
                  among=None, recompute="auto", orders=True) -> Placed:
    """Run `algorithm` on graph and cluster. `budget_s` caps the portfolio's work after
    its first candidate (None: no cap). `judged`: its candidates built and judged at
    this cluster already (portfolio.judge_all), the same placement sooner. On a step
    of micro-batches, the placement then carries the order of `schedule` ("auto":
    the fastest that fits; pardnn.pipeline.schedule), chaining the ops of `among`
    (pardnn.graph.order.step_mask). When nothing fits for memory, the levers: an
    order that lowers the peak (pardnn.pipeline.order_lever, carried by the
    placement), then, with `recompute` "auto", the graph with its activations
    recomputed (pardnn.pipeline.recompute; `placed.graph` is then that graph); "on"
    recomputes whenever some recomputation fits, "off" never. `orders` False: no
    order lever."""
    start = time.perf_counter()
    if recompute == "on":
        if next(recomputations(graph), None) is None:
            raise UserError("--recompute on: no op of this graph can be recomputed (it needs a backward pass "
                            "whose gradient ops read activations that stateless forward ops made)")
        return (_recomputing(graph, cluster, algorithm, budget_s, schedule, among, start)
                or _run_placement(graph, cluster, algorithm, budget_s, judged, schedule, among, start))
    try:
        return _run_placement(graph, cluster, algorithm, budget_s, judged, schedule, among, start)
    except UserError as short:
        if not str(short).startswith("memory:"):
            raise
        placed = _ordering(graph, cluster, algorithm, budget_s, schedule, among, start) if orders else None
        if placed is None and recompute == "auto":
            placed = _recomputing(graph, cluster, algorithm, budget_s, schedule, among, start)
        if placed is None:
            raise
        return placed


def _ordering(graph, cluster, algorithm, budget_s, schedule, among, start) -> Placed | None:
    """The placement of the first order of pardnn.pipeline.order_lever with which the
    step fits (the big gradient sums one after another: the lever that adds no
    compute, tried first), carrying that order; None when none fits."""
    for ordered in ordered_graphs(graph):
        inside = None if among is None else np.asarray(among, bool)[np.argsort(ordered.ids)]
        try:
            placed = _run_placement(ordered.graph, cluster, algorithm, budget_s, None, schedule, inside, start)
        except UserError:
            continue
        return replace(placed, placement=on_graph(graph, ordered, placed.placement), graph=graph,
                       seconds=time.perf_counter() - start)
    return None


FITTING_LEVERS = 3      # recomputations placed that fit, the fastest step kept


def _recomputing(graph, cluster, algorithm, budget_s, schedule, among, start) -> Placed | None:
    """The placement with the shortest step of the first FITTING_LEVERS recomputations
    (pardnn.pipeline.recompute, least added compute first) that fit, or None: how
    much a plan keeps decides how well the rest places, so the least added compute
    is not always the shortest step."""
    best, fitted = None, 0
    for lever in recomputations(graph):
        if least_memory_on(lever.graph, cluster).ruled_out(cluster.capacity) is not None:
            continue
        inside = None if among is None else _among(among, lever)
        try:
            placed = _run_placement(lever.graph, cluster, algorithm, budget_s, None, schedule, inside, start)
        except UserError:
            continue
        if best is None or placed.placement.schedule.makespan < best.placement.schedule.makespan:
            best = replace(placed, recomputation=lever)
        fitted += 1
        if fitted == FITTING_LEVERS:
            break
    return None if best is None else replace(best, seconds=time.perf_counter() - start)


def _among(among, lever):
    """The step mask of the recomputed graph: the copies are in the step."""
    inside = np.ones(lever.graph.num_nodes, bool)
    inside[lever.done.new_id] = np.asarray(among, bool)
    return inside


def _run_placement(graph, cluster, algorithm, budget_s, judged, schedule, among, start) -> Placed:
    """`run_placement` without the levers."""
    timings = {}
    chosen = choose(graph, cluster, algorithm, timings, budget_s, judged)
    _check_rules(graph, cluster, chosen.raw, f"candidate {chosen.winner!r} of {algorithm!r}")
    kept = chosen.judged
    _check_rules(graph, cluster, kept.device, "the memory repair")
    placement = Placement(kept.device, cluster, algorithm, stage_seconds=timings,
                          schedule=kept.schedule, profile=kept.profile)
    own = registry.schedule_of(algorithm) if schedule == "auto" else None
    placement, scheduled = carry_order(graph, placement, own or schedule, among)
    return Placed(placement, chosen, time.perf_counter() - start, scheduled, micro_batches(graph), graph)


def place(graph, cluster, algorithm="pardnn", budget_s=None, judged=None,
          recompute="auto") -> tuple[Placement, Report]:
    """(Placement, Report): `run_placement` and the report of what it placed (of
    `placed.graph` when a lever changed the graph: its `recompute` says so)."""
    placed = run_placement(graph, cluster, algorithm, budget_s, judged, recompute=recompute)
    return placed.placement, placement_report(placed.graph, placed)


def _check_rules(graph, cluster, device, who):
    problems = violations(graph, cluster, device)
    if problems:
        raise RuntimeError(f"{who} broke a placement rule: {problems[0]}")

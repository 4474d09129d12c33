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

from pardnn.base.errors import UserError
from pardnn.base.units import format_size
from pardnn.graph.constraints import violations
from pardnn.io.placement import Placement
from pardnn.pipeline.levers import fetching, host_compute, ordering, recomputing
from pardnn.pipeline.order_lever import ordered_graphs
from pardnn.pipeline.portfolio import Chosen, choose
from pardnn.pipeline.recompute import recomputations
from pardnn.pipeline.report import Report, placement_report
from pardnn.pipeline.schedule import carry_order, micro_batches
from pardnn.placers import registry
from pardnn.repair.least_memory import least_memory_on


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
    host_fetch: object = None       # the host-fetch lever placed with (pardnn.pipeline.host_fetch), or None


def run_placement(graph, cluster, algorithm="pardnn", budget_s=None, judged=None, schedule="auto",
                  among=None, recompute="auto", order="auto", fetch="auto") -> Placed:
    """Run `algorithm` on graph and cluster. `budget_s` caps the portfolio's work after
    its first candidate (None: no cap). `judged`: its candidates built and judged at
    this cluster already (portfolio.judge_all), the same placement sooner. On a step
    of micro-batches, the placement then carries the order of `schedule` ("auto":
    the fastest that fits; pardnn.pipeline.schedule), chaining the ops of `among`
    (pardnn.graph.order.step_mask).

    The memory levers (pardnn.pipeline.levers), only when memory binds: when nothing
    fits, an order that lowers the peak with `order` "auto" ("on": whenever one fits;
    "off": never), then, with `recompute` "auto", recomputation ("on": whenever some
    recomputation fits; "off": never); on a cluster with a host tier, when the
    placement runs compute-bound ops on the host, the host-fetch lever with `fetch`
    "auto" ("on": always; "off": never). `placed.graph` is the graph the placement is written for."""
    start = time.perf_counter()

    def attempt(g, inside, known=None):
        return _run_placement(g, cluster, algorithm, budget_s, known, schedule, inside, start)

    if recompute == "on" and next(recomputations(graph), None) is None:
        raise UserError("--recompute on: no op of this graph can be recomputed (it needs a backward pass "
                        "whose gradient ops read activations that stateless forward ops made)")
    proposed = ordered_graphs(graph) if order == "on" else None
    if order == "on" and not proposed:
        raise UserError("--memory-order on: no order lowers this graph's peak (its step on one device in TF's "
                        "order piles up no gradient sums or updates that an order would run one after another)")
    try:
        placed = (recomputing(graph, attempt, among, cluster) if recompute == "on" else None) \
            or (ordering(graph, attempt, among, proposed) if order == "on" else None) \
            or attempt(graph, among, judged)
    except UserError as short:
        if not str(short).startswith("memory:"):
            raise
        placed = ordering(graph, attempt, among) if order == "auto" else None
        if placed is None and recompute == "auto":
            placed = recomputing(graph, attempt, among, cluster)
        if placed is None and fetch != "off":
            placed = fetching(graph, attempt, among, cluster)
        if placed is None and recompute != "off" and next(recomputations(graph), None) is not None:
            raise UserError(_short_recomputing(graph, cluster)) from short
        if placed is None:
            raise
    if fetch == "on" or (fetch == "auto" and cluster.host_device >= 0 and host_compute(placed, cluster)):
        placed = fetching(graph, attempt, among, cluster, placed, always=fetch == "on") or placed
    return replace(placed, seconds=time.perf_counter() - start)


def _short_recomputing(graph, cluster) -> str:
    """The reason nothing fits once recomputation was tried too: the bounds that hold
    whatever is recomputed (pardnn.repair.least_memory, `recomputing`), not the one
    that keeps every activation, which recomputation can go below."""
    need = least_memory_on(graph, cluster).recomputing()
    why = need.shortfall(cluster.capacity)
    if why:
        return f"memory: no placement fits, whatever is recomputed: this graph needs {why}"
    usable = format_size(int(cluster.capacity.max()))
    return (f"memory: pardnn found no placement within {usable} per device (memory minus the "
            f"{cluster.reserve:.0%} reserve), recomputing activations or not; the bound below which none "
            f"exists, whatever is recomputed, is {need.describe()}")


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

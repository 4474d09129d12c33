"""The memory levers a placement pulls when memory binds (issue 51), each a rewrite of
the graph that is then placed like any graph: `attempt(graph, among)` is
pardnn.pipeline.place's portfolio run on it (UserError when nothing fits), `among`
the ops of the step as a bool mask of that graph (None: all).

- `ordering`: an order that lowers the peak (pardnn.pipeline.order_lever: the big
  gradient sums and the updates one after another), carried by the placement; it
  adds no compute, so it comes first;
- `recomputing`: activations recomputed in the backward pass
  (pardnn.pipeline.recompute); the shortest step of the first FITTING_LEVERS that
  fit, since how much a plan keeps decides how well the rest places;
- `fetching`: on a cluster with a host tier, the weights the placement keeps on the
  host read just before their layer, again for the backward pass, the reads ordered
  (pardnn.pipeline.host_fetch); alone, then over the first recomputations.

Each returns a pardnn.pipeline.place.Placed of the graph its placement is written
for (`Placed.graph`), or None when no form of it fits.
"""

from __future__ import annotations

import itertools
from dataclasses import replace

import numpy as np

from pardnn.base.errors import UserError
from pardnn.graph.op_rates import COMPUTE
from pardnn.pipeline.host_fetch import NAME as FETCH, host_fetch
from pardnn.pipeline.order_lever import Ordered, on_graph, ordered_graphs
from pardnn.pipeline.recompute import recomputations
from pardnn.repair.least_memory import least_memory_on

FITTING_LEVERS = 3      # recomputations placed that fit, the fastest step kept


def ordering(graph, attempt, among, proposed=None):
    """The placement of the first order of pardnn.pipeline.order_lever with which the
    step fits, carrying that order; None when none fits. `proposed`: the orders
    (order_lever.ordered_graphs) when the caller has them already."""
    for ordered in ordered_graphs(graph) if proposed is None else proposed:
        try:
            placed = attempt(ordered.graph, _mapped(among, ordered.ids, ordered.graph))
        except UserError:
            continue
        return replace(placed, placement=on_graph(graph, ordered, placed.placement), graph=graph)
    return None


def recomputing(graph, attempt, among, cluster):
    """The placement with the shortest step of the first FITTING_LEVERS recomputations
    that fit (pardnn.pipeline.recompute.recomputations' order), or None."""
    best, fitted = None, 0
    for lever in recomputations(graph):
        if least_memory_on(lever.graph, cluster).ruled_out(cluster.capacity) is not None:
            continue
        try:
            placed = attempt(lever.graph, _mapped(among, lever.done.new_id, lever.graph))
        except UserError:
            continue
        if best is None or placed.placement.schedule.makespan < best.placement.schedule.makespan:
            best = replace(placed, recomputation=lever)
        fitted += 1
        if fitted == FITTING_LEVERS:
            break
    return best


def fetching(graph, attempt, among, cluster, plain=None, always=False):
    """On a cluster with a host tier: the placement with the host-fetch lever, alone
    or over the first FITTING_LEVERS recomputations, with the shortest step (then the
    fewest compute-bound ops on the host; the search ends at one with none there);
    kept over `plain` (the placement without it) only when better by the same
    measure, or `always`. None without a host tier or when no form fits."""
    if cluster.host_device < 0:
        return None
    best = None if always else plain
    recomputed = itertools.islice(recomputations(graph), FITTING_LEVERS)
    for lever in itertools.chain([None], recomputed):
        base = graph if lever is None else lever.graph
        fetch = host_fetch(base)
        ids = fetch.ids[fetch.refetch.new_id]                  # the base graph's nodes in fetch.graph
        ids = ids if lever is None else ids[lever.done.new_id]
        try:
            placed = attempt(fetch.graph, _mapped(among, ids, fetch.graph))
        except UserError:
            continue
        placed = replace(placed, placement=on_graph(fetch.refetched, Ordered(FETCH, fetch.order, fetch.graph,
                                                                             fetch.ids), placed.placement),
                         graph=fetch.refetched, recomputation=lever, host_fetch=fetch)
        if best is None or _worse(best, cluster) > _worse(placed, cluster):
            best = placed
        if host_compute(placed, cluster) == 0:
            break
    return None if best is plain else best


def host_compute(placed, cluster) -> int:
    """How many compute-bound ops (MatMul, convolutions) `placed` runs on the host."""
    on_host = np.array([d.host_tier for d in cluster.devices])[np.asarray(placed.placement.device)]
    return int(np.count_nonzero(on_host & (placed.graph.rate_class == COMPUTE)))


def _worse(placed, cluster) -> tuple:
    return placed.placement.schedule.makespan, host_compute(placed, cluster)


def _mapped(among, ids, graph):
    """The step mask of a lever's graph: `among` of the graph it was made from at the
    new ids `ids`, the nodes the lever added in the step."""
    if among is None:
        return None
    inside = np.ones(graph.num_nodes, bool)
    inside[ids] = np.asarray(among, bool)
    return inside

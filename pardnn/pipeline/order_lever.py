"""The order lever: when no placement fits in memory as TF's executor orders the step
(FIFO), place the graph with an order that lowers its peak (issue 51, item 2).

The orders are pardnn.graph.memory_orders' proposals, tried in turn, the least
intrusive first. Each is applied to the graph as zero-byte control edges
(pardnn.graph.order.with_order), so the whole portfolio (placers, memory repair,
emulator) places and judges the step as the executor will run it once the placement
carries the edges (order.csv, `^before` inputs in placed_graph.pb, the Keras placed
tf.function). Nothing here runs when the step fits without an order: callers try it
only after the portfolio failed for memory (pardnn.pipeline.capacity; place's
run_placement), so a placement that fits is unchanged.

- `ordered_graphs`: each proposal as an `Ordered` (its name, its edges, the graph
  with them and where its nodes went);
- `order_lever`: the first proposal the portfolio fits on a cluster, with what it
  chose there, or None;
- `on_graph`: a placement of an ordered graph as one of the graph itself, carrying
  the order, with its emulation (`schedule_on_graph`).
"""

from __future__ import annotations

from dataclasses import replace
from typing import NamedTuple

import numpy as np

from pardnn.base.errors import UserError
from pardnn.emulator.memory import track_memory
from pardnn.emulator.scheduler import simulate
from pardnn.graph.memory_orders import proposals
from pardnn.graph.order import Order, with_order
from pardnn.hardware import parse_devices


class Ordered(NamedTuple):
    """One proposed order, applied."""

    name: str                   # the proposal (pardnn.graph.memory_orders.proposals)
    order: Order                # its control edges, node ids of the graph as given
    graph: object               # the graph with them (CostGraph.build renumbers it)
    ids: np.ndarray             # int64: the new id of each node of the graph as given


def ordered_graphs(graph) -> list:
    """An Ordered per order proposed for `graph` (in the order the step runs on one
    device, FIFO), the least intrusive first; none when the first does not lower the
    step's peak on one device: then FIFO piles nothing up that the orders unpile
    (transformers, CNNs), and each order tried would only repeat the failing checks'
    work (measured: 3x the time of a transformer's row, for the same least memory)."""
    start, fifo_peak = _one_device(graph)
    out = []
    for name, order in proposals(graph, start):
        ordered, ids = with_order(graph, order)
        if not out and _one_device(ordered)[1] >= fifo_peak:
            return []
        out.append(Ordered(name, order, ordered, ids))
    return out


def _one_device(graph):
    """(start per node, peak bytes) of the step on one device in TF's order."""
    one, device = parse_devices("cpu:1").with_options(memory=2**62), np.zeros(graph.num_nodes, np.int32)
    schedule = simulate(graph, one, device)
    return schedule.start, int(track_memory(graph, one, device, schedule).peak_bytes[0])


def order_lever(graph, cluster, algorithm="pardnn", timings=None, budget_s=None):
    """(Ordered, portfolio.Chosen on its graph) for the first order with which
    `algorithm`'s portfolio fits `cluster`; None when none does. For a caller whose
    portfolio did not fit without an order (the lever costs step time: the ordered
    sums wait for each other)."""
    from pardnn.pipeline.portfolio import choose
    for ordered in ordered_graphs(graph):
        try:
            return ordered, choose(ordered.graph, cluster, algorithm, timings, budget_s)
        except UserError:
            continue
    return None


def on_graph(graph, ordered, placement):
    """`placement` (a pardnn.io.placement.Placement of `ordered.graph`) as a placement
    of `graph`, the graph as given: its device per node, carrying the order (written
    as order.csv and as control inputs of placed_graph.pb), named by the proposal, and
    its emulation (`schedule_on_graph`) and memory over the step on `graph`'s ids."""
    order, name = ordered.order, ordered.name
    if placement.order is not None and len(placement.order):     # a micro-batch schedule's chains too
        old = np.empty(len(ordered.ids), np.int64)
        old[ordered.ids] = np.arange(len(ordered.ids))
        order = Order(np.concatenate([order.before, old[placement.order.before]]),
                      np.concatenate([order.after, old[placement.order.after]]))
        name = f"{placement.schedule_name}+{name}"
    device = np.asarray(placement.device)[ordered.ids]
    schedule = schedule_on_graph(graph, ordered, placement.schedule)
    profile = None if schedule is None else track_memory(graph, placement.cluster, device, schedule)
    return replace(placement, device=device, order=order, schedule_name=name, schedule=schedule, profile=profile)


def schedule_on_graph(graph, ordered, schedule):
    """The emulation `schedule` of `ordered.graph` (pardnn.emulator.scheduler.Schedule)
    by `graph`'s node and edge ids: the same times; the transfers that only the
    order's control edges carry (a zero-byte signal) left out. None for None."""
    if schedule is None:
        return None
    new = ordered.graph
    old = np.empty(len(ordered.ids), np.int64)
    old[ordered.ids] = np.arange(len(ordered.ids))
    edge = _matching_edges(graph, old[new.edge_src], old[new.edge_dst], new.edge_slot)
    carried = schedule.edge_transfer[edge]
    kept = np.unique(carried[carried >= 0])
    number = np.full(len(schedule.transfer_edge), -1, np.int64)
    number[kept] = np.arange(len(kept))
    edge_transfer = np.where(carried >= 0, number[np.maximum(carried, 0)], -1) if len(number) else carried
    first = np.full(len(kept), graph.num_edges, np.int64)
    on = np.flatnonzero(edge_transfer >= 0)
    np.minimum.at(first, edge_transfer[on], on)
    return replace(schedule, start=schedule.start[ordered.ids], finish=schedule.finish[ordered.ids],
                   edge_transfer=edge_transfer, transfer_edge=first, transfer_dst=schedule.transfer_dst[kept],
                   transfer_bytes=graph.edge_bytes[first], transfer_send=schedule.transfer_send[kept],
                   transfer_arrival=schedule.transfer_arrival[kept])


def _matching_edges(graph, src, dst, slot) -> np.ndarray:
    """int64 per edge of `graph`: an edge (`src`, `dst`, `slot`: the ordered graph's
    edges by `graph`'s node ids) with its ends and slot, each used once."""
    pool = {}
    for e in range(len(src) - 1, -1, -1):
        pool.setdefault((int(src[e]), int(dst[e]), int(slot[e])), []).append(e)
    keys = zip(graph.edge_src.tolist(), graph.edge_dst.tolist(), graph.edge_slot.tolist())
    return np.array([pool[key].pop() for key in keys], np.int64)

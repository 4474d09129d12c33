"""Host fetch as a placement lever (issue 51): the graph a plan runs when the weights
it keeps on the host are fetched just before their layer, once for the forward pass
and once for the backward (pardnn.graph.host_fetch), the reads ordered by control
edges (pardnn.graph.order).

`host_fetch(graph)` gives the graph to place (the second reads and the order's edges
in it) and what it is made of; `on_refetched` turns a placement of that graph into one
of the refetched graph carrying the order, as order.csv and placed_graph.pb carry it.
A second read of a variable that the placement keeps on a GPU costs nothing (a read
aliases the variable), so the lever only matters on a cluster with a host tier; it changes the step's order, so callers
ask for it (tools.bench_offload `--host-fetch`), and a placement that fits without
it is placed without it.
"""

from __future__ import annotations

from dataclasses import replace
from typing import NamedTuple

import numpy as np

from pardnn.graph.host_fetch import MIN_BYTES, Refetch, fetch_order, weight_reads, with_refetch
from pardnn.graph.order import Order, with_order
from pardnn.pipeline.recompute import late_readers, one_device_times

NAME = "host-fetch"


class HostFetch(NamedTuple):
    """The host-fetch lever applied to a graph."""

    graph: object           # the CostGraph to place: `refetched` with the order's edges
    refetched: object       # the graph with the second reads (what a placement carries)
    refetch: Refetch        # where the second reads went, ids of `refetched`
    order: Order            # the fetch order, ids of `refetched`
    ids: np.ndarray         # int64: the id in `graph` of each node of `refetched`


def host_fetch(graph, depth=2, min_bytes=MIN_BYTES) -> HostFetch:
    """The lever on `graph`: its weight reads (`min_bytes` or more) read again for the
    backward pass's late readers, all of them ordered `depth` apart by the start of
    their first reader on one device under FIFO."""
    start, finish = one_device_times(graph)
    readers, _ = late_readers(graph, start, finish)
    refetched, done = with_refetch(graph, weight_reads(graph, min_bytes), readers)
    begins = np.empty(refetched.num_nodes)
    begins[done.new_id] = start
    begins[done.copies] = begins[done.originals]
    order = fetch_order(refetched, weight_reads(refetched, min_bytes), begins, depth)
    ordered, ids = with_order(refetched, order)
    return HostFetch(ordered, refetched, done, order, ids)


def on_refetched(lever, placement):
    """A placement of `lever.graph` as one of `lever.refetched`: its device per node,
    carrying the fetch order (order.csv, `^before` inputs of placed_graph.pb), named
    by the lever. Its emulation stays with `lever.graph`, whose arrays it indexes."""
    return replace(placement, device=np.asarray(placement.device)[lever.ids], order=lever.order,
                   schedule_name=NAME, schedule=None, profile=None)

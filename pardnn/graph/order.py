"""Order edges: the executor's order, carried by a plan as control edges (issues 50, 51).

TF's executor runs each device's ready ops first in, first out
(pardnn.emulator.scheduler). Where the order matters (the micro-batches of a
pipelined step, weights fetched from the host just before their layer, gradient
sums one after another), a plan carries the order it wants as control edges: op
`after` cannot start before op `before` has finished. TF honours a control edge
whatever its config (Grappler may not drop one that orders two ops; tested in real
runs), and so does the emulator, for which it is an edge like any other.

This module is the one place that makes, checks and applies orders:

- `Order`: the pairs, as node ids of one CostGraph;
- `device_chains`: an edge from each op to the next one on its device, in the order
  of a schedule's start times (ties by node id, which is topological): the order of
  a list schedule (pardnn.emulator.scheduler with `priority`), made binding;
- `with_order`: the graph plus an order's edges (zero bytes, slot -1) and where its
  nodes went (CostGraph.build renumbers in topological order); an order that would
  close a cycle, so that TF would wait forever, is refused, naming a node on it;
- `order_rows` / `read_order_rows`: the order by node names, as `order.csv` of a
  place output holds it (pardnn.io.placement writes it, pardnn.tf.placed_graph adds
  the edges to placed_graph.pb as `^before` inputs).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pardnn.base.errors import GraphError
from pardnn.graph.costgraph import CostGraph


@dataclass(frozen=True, eq=False)
class Order:
    """Control edges `before[i] -> after[i]` (int64 node ids of one graph)."""

    before: np.ndarray
    after: np.ndarray

    def __len__(self) -> int:
        return len(self.before)

    @classmethod
    def empty(cls) -> "Order":
        return cls(np.zeros(0, np.int64), np.zeros(0, np.int64))


def device_chains(graph, device, start) -> Order:
    """The order that makes each device run its ops in the order of `start` (float per
    node; ties by node id): an edge from each op to the next on its device, where no
    edge of the graph already says as much."""
    device = np.asarray(device, np.int64)
    order = np.lexsort((np.arange(graph.num_nodes), np.asarray(start), device))
    same = device[order[1:]] == device[order[:-1]]
    before, after = order[:-1][same], order[1:][same]
    known = set(zip(graph.edge_src.tolist(), graph.edge_dst.tolist()))
    new = np.array([(int(b), int(a)) not in known for b, a in zip(before, after)], bool)
    return Order(before[new].astype(np.int64), after[new].astype(np.int64))


def with_order(graph, order):
    """(the graph with the order's control edges, new id of each old node). GraphError
    naming a node when the edges close a cycle (a deadlock) or an id is not a node."""
    if len(order) == 0:
        return graph, np.arange(graph.num_nodes, dtype=np.int64)
    n = graph.num_nodes
    if min(order.before.min(), order.after.min()) < 0 or max(order.before.max(), order.after.max()) >= n:
        raise GraphError(f"order: a node id outside 0..{n - 1}")
    zeros = np.zeros(len(order), np.int64)
    try:
        ordered = CostGraph.build(
            names=graph.names, ops=graph.ops, comp_us=graph.comp_us, out_bytes=graph.out_bytes,
            persist_bytes=graph.persist_bytes, kind=graph.kind, group=graph.group, pinned=graph.pinned,
            edge_src=np.concatenate([graph.edge_src, order.before]),
            edge_dst=np.concatenate([graph.edge_dst, order.after]),
            edge_bytes=np.concatenate([graph.edge_bytes, zeros]),
            edge_slot=np.concatenate([graph.edge_slot, zeros - 1]), temp_bytes=graph.temp_bytes)
    except GraphError as exc:
        raise GraphError(f"order: its control edges would deadlock the step ({exc})") from None
    index = ordered.index()
    return ordered, np.array([index[name] for name in graph.names], np.int64)


def order_rows(graph, order) -> list:
    """[(before name, after name)] of an order, in its order."""
    return [(graph.names[b], graph.names[a]) for b, a in zip(order.before.tolist(), order.after.tolist())]


def read_order_rows(graph, rows, source="order") -> Order:
    """The Order of (before name, after name) rows; GraphError naming `source` and an
    unknown name."""
    index = graph.index()
    ids = []
    for before, after in rows:
        for name in (before, after):
            if name not in index:
                raise GraphError(f"{source}: node {name!r} is not in the graph")
        ids.append((index[before], index[after]))
    pairs = np.array(ids, np.int64).reshape(-1, 2)
    return Order(pairs[:, 0].copy(), pairs[:, 1].copy())

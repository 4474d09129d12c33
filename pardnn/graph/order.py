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
  a list schedule (pardnn.emulator.scheduler with `priority`), made binding; among
  the ops of the step (`step_mask`: a TF1 graph's initialisers stay out of it);
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


def step_mask(graph, fetches=(), others=()) -> np.ndarray:
    """bool per node: in the step, i.e. one of the ops of `fetches` (TF names, "op" or
    "op:0", as profile.json lists them) or an op they depend on, and needed by none
    of `others` (the initialiser, profile.json's `init`: a TF1 graph's variables and
    their initial values are run by it too, and an op chained behind a step's op
    would make it wait for the step's feeds). Every node when no fetch is in the
    graph (a tf.function's graph is all step)."""
    closure = _closure(graph, fetches)
    if closure is None:
        return np.ones(graph.num_nodes, bool)
    shared = _closure(graph, others)
    return closure if shared is None else closure & ~shared


def _closure(graph, names):
    """bool per node: the ops `names` name and every op they depend on; None if none is a node."""
    index = graph.index()
    roots = [index[op] for op in (f.split(":")[0].lstrip("^") for f in names) if op in index]
    if not roots:
        return None
    inside = np.zeros(graph.num_nodes, bool)
    inside[roots] = True
    stack = list(roots)
    while stack:
        v = stack.pop()
        for u in graph.pred_src[graph.pred_ptr[v]:graph.pred_ptr[v + 1]].tolist():
            if not inside[u]:
                inside[u] = True
                stack.append(u)
    return inside


def device_chains(graph, device, start, among=None) -> Order:
    """The order that makes each device run its ops (those of `among`, a bool mask:
    default all) in the order of `start` (float per node; ties by node id): an edge
    from each op to the next on its device, where no edge of the graph already says
    as much."""
    device = np.asarray(device, np.int64)
    order = np.lexsort((np.arange(graph.num_nodes), np.asarray(start), device))
    if among is not None:
        order = order[np.asarray(among, bool)[order]]
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


def control_inputs(graph, order) -> dict:
    """{after name: ["^before name", ...]}: an order as the control inputs a GraphDef
    node gets (empty for None)."""
    waits = {}
    for before, after in ([] if order is None else order_rows(graph, order)):
        waits.setdefault(after, []).append("^" + before)
    return waits


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

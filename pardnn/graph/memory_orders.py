"""Orders that lower the peak memory of a step (issue 51, item 2): proposed here,
made, checked and carried by pardnn.graph.order.

TF's executor (and pardnn.emulator.scheduler) runs each device's ready ops first in,
first out. In a recurrent network's backward pass that runs every per-timestep weight
gradient as soon as it can: the gradients of every weight pile up at once, each
weight's waiting for its sum (an AddN, or AccumulateNV2, of one input per timestep).
The least-memory bound (pardnn.repair.least_memory) allows any order; FIFO is one.

- `sum_order`: the big sums (`SUMS` with at least `inputs` data inputs) one after
  another, in the order a one-device FIFO emulation starts them (the caller's
  `start`: the emulator is a layer above the graph): each sum's producers
  wait, by a zero-byte control edge, for the previous sum to finish; not where a
  producer already precedes the previous sum (the edges added before included), as
  that edge would close a cycle. One weight's gradients are then alive at a time, not
  all of them.
- `update_order`: the optimizer's updates one after another, in the same way. After
  a global-norm clip every clipped gradient is made at once, each then waiting for
  its update (on word-rnn, on the device that holds the variables).
- `one_after_another`: the edges of both, for any ops;
- `proposals`: the orders worth trying on a graph, by name, the least intrusive first.

These are functions of the CostGraph: the placement pipeline applies one only when
memory binds (pardnn.pipeline.order_lever), never when the step fits without it.
"""

from __future__ import annotations

import numpy as np

from pardnn.graph.order import Order

SUMS = ("AddN", "AccumulateNV2")
SUM_INPUTS = 4          # data inputs a sum needs to be ordered (fewer: little to pile up)
APPLY = "Apply"         # in the op type of an optimizer's update (ResourceApplyAdam, ApplyGradientDescent)


def big_sums(graph, inputs=SUM_INPUTS) -> np.ndarray:
    """int64 ids of the sums with at least `inputs` data inputs, in id order."""
    data = graph.edge_slot >= 0
    fan_in = np.bincount(graph.edge_dst[data], minlength=graph.num_nodes)
    is_sum = np.array([op in SUMS for op in graph.ops], bool)
    return np.flatnonzero(is_sum & (fan_in >= inputs)).astype(np.int64)


def sum_order(graph, start, inputs=SUM_INPUTS) -> Order:
    """The big sums one after another (module docstring), in the order of `start`
    (float per node, ties by id: a one-device FIFO emulation's starts, say)."""
    return one_after_another(graph, big_sums(graph, inputs), start)


def update_order(graph, start, given=None) -> Order:
    """The optimizer's updates (`APPLY` in the op type) one after another, each one's
    inputs (the clipped gradient) made after the previous update finished; after the
    edges of `given` (an Order), if any."""
    updates = np.array([n for n, op in enumerate(graph.ops) if APPLY in op], np.int64)
    return one_after_another(graph, updates, start, given)


def one_after_another(graph, ops, start, given=None) -> Order:
    """The control edges that run `ops` (node ids) one after another, in the order of
    `start` (float per node, ties by id), after those of `given` (an Order:
    kept first): the data producers of each wait for the previous one to finish,
    except a producer that precedes it already (`given`'s edges and those added before
    included), as that edge would close a cycle."""
    ops = np.asarray(ops, np.int64)
    given = Order.empty() if given is None else given
    if len(ops) < 2:
        return given
    ops = ops[np.lexsort((ops, np.asarray(start)[ops]))]
    data = graph.edge_slot >= 0
    extra = {}                          # node -> the added edges' sources into it
    for b, a in zip(given.before.tolist(), given.after.tolist()):
        extra.setdefault(a, []).append(b)
    before, after = given.before.tolist(), given.after.tolist()
    for prev, nxt in zip(ops[:-1].tolist(), ops[1:].tolist()):
        above = _ancestors(graph, prev, extra)
        producers = np.unique(graph.edge_src[data & (graph.edge_dst == nxt)])
        for p in producers.tolist():
            if above[p]:                # already before prev, or the edge would close a cycle
                continue
            extra.setdefault(p, []).append(prev)
            before.append(prev)
            after.append(p)
    return Order(np.array(before, np.int64), np.array(after, np.int64))


def proposals(graph, start) -> list:
    """[(name, Order)]: the orders to try when memory binds, the least intrusive first
    (each later one holds the earlier's edges): the big sums one after another, then
    the optimizer's updates too, each in the order of `start` (float per node: the
    starts of the step emulated on one device in TF's order, say). An order without
    an edge, or with no more than the one before, is left out."""
    sums = sum_order(graph, start)
    found, edges = [], 0
    for name, order in (("sum-order", sums), ("sum-and-update-order", update_order(graph, start, sums))):
        if len(order) > edges:
            found.append((name, order))
            edges = len(order)
    return found


def _ancestors(graph, v, extra) -> np.ndarray:
    """bool per node: `v` and every node it depends on, by the graph's edges and `extra`
    (node -> added sources into it)."""
    inside = np.zeros(graph.num_nodes, bool)
    inside[v] = True
    stack = [v]
    while stack:
        u = stack.pop()
        for p in graph.pred_src[graph.pred_ptr[u]:graph.pred_ptr[u + 1]].tolist() + extra.get(u, []):
            if not inside[p]:
                inside[p] = True
                stack.append(p)
    return inside

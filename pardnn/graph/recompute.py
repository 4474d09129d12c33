"""Recomputation: chosen forward ops run a second time in the backward pass, instead of
keeping their outputs alive from the forward pass to the backward (issue 51).

A training step keeps every activation the backward pass reads, from the op that makes
it until the gradient op that reads it: at the loss, a deep model holds all of them at
once. Recomputing an op frees its output right after its last forward use; a copy of
the op runs again just before the backward pass needs it (Chen et al. 2016, "Training
Deep Nets with Sublinear Memory Cost"; the recomputation Piper chooses per stage,
shared/papers/003). `with_recompute` makes that rewrite on the CostGraph, so the
emulator charges the second run (the copies are nodes like any other) and the memory
model frees what they free; pardnn.tf writes the same copies into placed_graph.pb and
the placed tf.function (docs/algorithm.md, "Recomputation").

The rewrite, for the chosen ops (`ops`):
- each op X gets a copy named `pardnn_recompute/X` (`copy_name`): its op type, costs,
  output bytes and scratch, kind NORMAL, and X's colocation group, so it runs where X
  runs (in TF the copied NodeDef keeps X's attributes, its colocation among them);
- the copy reads the copy of each input that is recomputed too, and the original of
  every other (a kept tensor: a checkpoint); X's control inputs stay control inputs;
- the readers (the backward pass by default: pardnn.graph.passes.is_backward) that
  read X read its copy instead, every output of it;
- the copies that read no other copy get a control edge from a *trigger*: the latest
  backward op that the first reader of their segment (copies joined by data edges)
  waits for. Without it a copy would be ready at forward time, since its checkpoints
  are, and TF's executor (first in, first out) would run it at once, keeping its output
  as long as the original's: a segment whose first reader waits for no backward op
  is therefore not recomputed at all. The trigger precedes the segment's first reader, so the
  edge closes no cycle (docs/algorithm.md gives the argument).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from pardnn.base.errors import GraphError
from pardnn.graph.costgraph import NORMAL, CostGraph

PREFIX = "pardnn_recompute/"


def copy_name(name: str) -> str:
    """The name of op `name`'s recomputed copy."""
    return PREFIX + name


def original_name(name: str):
    """The op a copy recomputes, or None when `name` is not a copy."""
    return name[len(PREFIX):] if name.startswith(PREFIX) else None


@dataclass(frozen=True, eq=False)
class Recomputed:
    """What `with_recompute` did, as ids of the new graph."""

    originals: np.ndarray   # int64: the ops recomputed
    copies: np.ndarray      # int64: their copies, in the same order
    triggers: np.ndarray    # int64: per copy, the op its control edge waits for, or -1
    new_id: np.ndarray      # int64 per node of the old graph: its id in the new one

    def __len__(self) -> int:
        return len(self.copies)


def with_recompute(graph, ops, readers, start, finish):
    """(new graph, Recomputed): `graph` with ops `ops` (ids) recomputed for `readers`
    (bool per node: the backward ops that run after the forward pass), the triggers
    chosen by `start` and `finish` (per node: a schedule of `graph`, e.g. the emulator's
    on one device), as the module docstring says. GraphError naming the op when one is
    not a NORMAL op, is a reader itself, or is already a copy."""
    ops = np.unique(np.asarray(ops, np.int64))
    if len(ops) == 0:
        n = graph.num_nodes
        return graph, Recomputed(*(np.zeros(0, np.int64),) * 3, np.arange(n, dtype=np.int64))
    readers = np.asarray(readers, bool)
    _check(graph, ops, readers)
    n, m = graph.num_nodes, len(ops)
    copy_of = np.full(n, -1, np.int64)
    copy_of[ops] = n + np.arange(m)
    src, dst = graph.edge_src.astype(np.int64), graph.edge_dst.astype(np.int64)
    data = graph.edge_slot >= 0
    moved = data & (copy_of[src] >= 0) & readers[dst]
    into = copy_of[dst] >= 0
    in_src = np.where(data[into] & (copy_of[src[into]] >= 0), copy_of[src[into]], src[into])
    in_dst = copy_of[dst[into]]
    links = Links(in_src - n, in_dst - n, in_src >= n, copy_of[src[moved]] - n, dst[moved])
    trigger, waiting = _triggers(graph, m, links, readers & (copy_of < 0), np.asarray(start), np.asarray(finish))
    if not waiting.all():       # a segment nothing waits for would run at forward time: no saving
        return with_recompute(graph, ops[waiting], readers, start, finish)
    roots = np.flatnonzero(trigger >= 0)
    new = CostGraph.build(
        names=list(graph.names) + [copy_name(graph.names[x]) for x in ops.tolist()],
        ops=list(graph.ops) + [graph.ops[x] for x in ops.tolist()],
        comp_us=np.concatenate([graph.comp_us, graph.comp_us[ops]]),
        out_bytes=np.concatenate([graph.out_bytes, graph.out_bytes[ops]]),
        persist_bytes=np.concatenate([graph.persist_bytes, np.zeros(m, graph.persist_bytes.dtype)]),
        temp_bytes=np.concatenate([graph.temp_bytes, graph.temp_bytes[ops]]),
        kind=np.concatenate([graph.kind, np.full(m, NORMAL, graph.kind.dtype)]),
        group=np.concatenate([graph.group, graph.group[ops]]).tolist(),
        pinned=list(graph.pinned) + [graph.pinned[x] for x in ops.tolist()],
        edge_src=np.concatenate([np.where(moved, copy_of[src], src), in_src, trigger[roots]]),
        edge_dst=np.concatenate([dst, in_dst, n + roots]),
        edge_bytes=np.concatenate([graph.edge_bytes, graph.edge_bytes[into], np.zeros(len(roots), np.int64)]),
        edge_slot=np.concatenate([graph.edge_slot, graph.edge_slot[into], np.full(len(roots), -1)]))
    index = new.index()
    new_id = np.array([index[name] for name in graph.names], np.int64)
    copies = np.array([index[copy_name(graph.names[x])] for x in ops.tolist()], np.int64)
    triggers = np.where(trigger >= 0, new_id[np.maximum(trigger, 0)], -1)
    return new, Recomputed(new_id[ops], copies, triggers, new_id)


class Links(NamedTuple):
    """The copies' data links, by copy index (0..m-1): copy `a[i]` feeds copy `b[i]`
    where `joined[i]`; copy `read[j]` is read by op `reader[j]`."""

    a: np.ndarray
    b: np.ndarray
    joined: np.ndarray
    read: np.ndarray
    reader: np.ndarray


def _check(graph, ops, readers) -> None:
    if ops[0] < 0 or ops[-1] >= graph.num_nodes:
        raise GraphError(f"recompute: a node id outside 0..{graph.num_nodes - 1}")
    for x in ops.tolist():
        name = graph.names[x]
        why = ("is already a copy" if original_name(name) is not None else
               "is read by the backward pass as one of its own ops" if readers[x] else
               "holds state (a variable or a reference), so a second run is not the first"
               if graph.kind[x] != NORMAL else None)
        if why:
            raise GraphError(f"recompute: op {name!r} {why}")


def _triggers(graph, m, links, waits, start, finish) -> tuple:
    """(trigger, waiting): int64 per copy, the op its control edge comes from, or -1 (a
    copy that reads another copy, or whose segment waits for nothing); bool per copy,
    its segment waits for an op. Each segment (copies joined by data edges) waits for
    the predecessor of its first reader (by `start`, ties by id) among `waits` that
    finishes last; a segment whose first reader has none, or that no reader reads,
    waits for nothing."""
    segment = _segments(m, links.a, links.b, links.joined)
    seg = segment[links.read]
    first = {}
    for s, r in zip(seg.tolist(), links.reader.tolist()):
        if s not in first or (start[r], r) < (start[first[s]], first[s]):
            first[s] = r
    wait = {}
    for s, r in first.items():
        preds = graph.pred_src[graph.pred_ptr[r]:graph.pred_ptr[r + 1]]
        preds = preds[waits[preds]]
        if len(preds):
            wait[s] = int(preds[np.lexsort((preds, finish[preds]))[-1]])
    reads_copy = np.zeros(m, bool)
    reads_copy[links.b[links.joined]] = True
    trigger = np.array([-1 if reads_copy[i] else wait.get(int(segment[i]), -1) for i in range(m)], np.int64)
    return trigger, np.isin(segment, np.fromiter(wait, np.int64, len(wait)))


def _segments(m, a, b, joined) -> np.ndarray:
    """int64 per copy: the smallest copy index of its segment (union-find over the
    copy-to-copy data edges `a[joined] -> b[joined]`)."""
    parent = np.arange(m)

    def root(i):
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i
    for x, y in zip(a[joined].tolist(), b[joined].tolist()):
        rx, ry = root(x), root(y)
        if rx != ry:
            parent[max(rx, ry)] = min(rx, ry)
    return np.array([root(i) for i in range(m)], np.int64)


def recompute_rows(graph) -> list:
    """(producer, slot, consumer) names of every edge of `graph` (a CostGraph) into or
    out of a recomputed op's copy, slot -1 for a control edge, in edge order; [] for
    a graph without copies."""
    copies = np.array([original_name(name) is not None for name in graph.names], bool)
    if not copies.any():
        return []
    names = graph.names
    return [(names[graph.edge_src[e]], int(graph.edge_slot[e]), names[graph.edge_dst[e]])
            for e in np.flatnonzero(copies[graph.edge_src] | copies[graph.edge_dst]).tolist()]

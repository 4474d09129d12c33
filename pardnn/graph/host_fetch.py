"""Weights fetched from the host just before their layer runs (issue 51, item 2).

On a cluster with a host tier (`PRESET+host`) the memory repair moves the large
variables, their Adam slots and updates to the host; each GPU then reads a copy of a
weight over PCIe. Measured on tools/gpt_model.py's GPT on one H100 and its host
(docs/benchmarks.md, "The host as a device"), two things fill the GPU at its peak:
- a variable read (ReadVariableOp) has no input but the variable's handle, so TF's
  executor (first in, first out: pardnn.emulator.scheduler) runs every read at the
  step's start, and the copies queue on the host-to-GPU link in the reads' order;
- each copy stays on the GPU from the forward MatMul that reads it to the backward
  MatMul that reads it again (dX = dY W^T): at the turn of the step, every weight of
  the model is on the GPU beside every activation (40 of 77 GB at 52 blocks).

ZeRO-Infinity's answer, carried by the graph:
- `with_refetch`: the backward readers of a read read a second read of the same
  variable (`copy_name`, as pardnn.graph.recompute names its copies), run on the
  variable's device (its colocation group), so the forward copy is freed after the
  forward pass and the weight crosses again just before its backward layer. The
  second read keeps the original's control edges to the backward pass (the
  variable's update waits for it, as TF's automatic control dependencies make the
  update wait for the first): a re-read before the update gives the first read's
  value, never a silent wrong gradient.
- `fetch_order`: the reads one after another in the order their first reader starts
  (a one-device FIFO schedule), each waiting for the first reader of the read
  `depth` places before it: at most about `depth` weights are in flight or waiting
  on the GPU, instead of all of them. The backward's gradients are then made at the
  pace the weights arrive, which is the pace the GPU-to-host link sends them back
  (the same bytes, one link each way).
The Order goes through pardnn.graph.order (with_order; order.csv; `^before` inputs).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from pardnn.graph.costgraph import CostGraph
from pardnn.graph.order import Order
from pardnn.graph.recompute import copy_name

READS = ("ReadVariableOp",)
MIN_BYTES = 1 << 20         # a read whose copy is smaller is left to FIFO: little to hold


class Refetch(NamedTuple):
    """What `with_refetch` did, as ids of the new graph."""

    originals: np.ndarray   # int64: the reads read a second time
    copies: np.ndarray      # int64: their second reads, in the same order
    new_id: np.ndarray      # int64 per node of the old graph: its id in the new one


def weight_reads(graph, min_bytes=MIN_BYTES) -> np.ndarray:
    """int64 ids of the variable reads with a data output of at least `min_bytes`."""
    data = graph.edge_slot >= 0
    out = np.zeros(graph.num_nodes, np.int64)
    np.maximum.at(out, graph.edge_src[data], graph.edge_bytes[data])
    is_read = np.array([op in READS for op in graph.ops], bool)
    return np.flatnonzero(is_read & (out >= min_bytes)).astype(np.int64)


def with_refetch(graph, reads, readers):
    """(new graph, Refetch): each read of `reads` that a `readers` op (bool per node:
    the backward pass's late readers, pardnn.pipeline.recompute.late_readers) reads
    gets a second read, same op, costs, kind and colocation group, with the first's
    inputs; the readers read it instead, and the first's control edges into readers
    are copied to it."""
    readers = np.asarray(readers, bool)
    src, dst = graph.edge_src.astype(np.int64), graph.edge_dst.astype(np.int64)
    late_out = np.zeros(graph.num_nodes, bool)
    late_out[src[readers[dst] & (graph.edge_slot >= 0)]] = True
    reads = np.unique(np.asarray(reads, np.int64))
    reads = reads[late_out[reads]]
    n, m = graph.num_nodes, len(reads)
    copy_of = np.full(n, -1, np.int64)
    copy_of[reads] = n + np.arange(m)
    moved = (copy_of[src] >= 0) & readers[dst]          # data and control edges to readers
    into = copy_of[dst] >= 0
    new = CostGraph.build(
        names=list(graph.names) + [copy_name(graph.names[x]) for x in reads.tolist()],
        ops=list(graph.ops) + [graph.ops[x] for x in reads.tolist()],
        **{col: np.concatenate([getattr(graph, col), getattr(graph, col)[reads]])
           for col in ("comp_us", "out_bytes", "persist_bytes", "temp_bytes", "kind")},
        group=np.concatenate([graph.group, graph.group[reads]]).tolist(),
        pinned=list(graph.pinned) + [graph.pinned[x] for x in reads.tolist()],
        edge_src=np.concatenate([np.where(moved & (graph.edge_slot >= 0), copy_of[src], src),
                                 src[into], copy_of[src[moved & (graph.edge_slot < 0)]]]),
        edge_dst=np.concatenate([dst, copy_of[dst[into]], dst[moved & (graph.edge_slot < 0)]]),
        edge_bytes=np.concatenate([graph.edge_bytes, graph.edge_bytes[into],
                                   graph.edge_bytes[moved & (graph.edge_slot < 0)]]),
        edge_slot=np.concatenate([graph.edge_slot, graph.edge_slot[into],
                                  graph.edge_slot[moved & (graph.edge_slot < 0)]]))
    index = new.index()
    new_id = np.array([index[name] for name in graph.names], np.int64)
    copies = np.array([index[copy_name(graph.names[x])] for x in reads.tolist()], np.int64)
    return new, Refetch(new_id[reads], copies, new_id)


def fetch_order(graph, reads, start, depth=2) -> Order:
    """The reads `reads` one after another (module docstring): sorted by the start
    (float per node, e.g. a one-device FIFO schedule's; ties by id) of their first
    data reader, read i waits for the first reader of read i - depth. Reads without
    a data reader, and pairs whose reader is read i's own, are left out."""
    reads = np.asarray(reads, np.int64)
    start = np.asarray(start, float)
    data = graph.edge_slot >= 0
    first = np.full(graph.num_nodes, -1, np.int64)
    for e in np.flatnonzero(data & np.isin(graph.edge_src, reads)).tolist():
        r, c = int(graph.edge_src[e]), int(graph.edge_dst[e])
        if first[r] < 0 or (start[c], c) < (start[first[r]], first[r]):
            first[r] = c
    reads = reads[first[reads] >= 0]
    reads = reads[np.lexsort((first[reads], start[first[reads]]))]
    if len(reads) <= depth:
        return Order.empty()
    trigger, target = first[reads[:-depth]], reads[depth:]
    own = _reads_of(graph, trigger, target)
    return Order(trigger[~own].astype(np.int64), target[~own].astype(np.int64))


def _reads_of(graph, consumer, read) -> np.ndarray:
    """bool per pair: `consumer[i]` has a data edge from `read[i]`."""
    data = graph.edge_slot >= 0
    pairs = set(zip(graph.edge_src[data].tolist(), graph.edge_dst[data].tolist()))
    return np.array([(int(r), int(c)) in pairs for c, r in zip(consumer, read)], bool)

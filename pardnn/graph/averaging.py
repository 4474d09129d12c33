"""Which tensors data parallelism averages across replicas (`pardnn place --replicas R`,
docs/multihost.md), on the cost graph; the TF rewrite (pardnn.tf.replicate) and the
step estimate (pardnn.pipeline.replicas) both read it, and name the means alike.

What is averaged: every input of a variable update (an optimizer's Apply op, an
Assign*, a Scatter*) that depends on the replica's data — reachable from a
Placeholder (or an input pipeline's IteratorGetNext) along data edges. For an
optimizer that is the gradient; for a moving average (batch norm) it is the update
delta. Inputs that do not depend on the data (learning rate, Adam's beta powers)
are left alone: they are already equal in every replica.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from pardnn.base.errors import UserError

WRITER_OPS = re.compile(r"^(Resource)?(Sparse)?Apply[A-Z]|Assign"
                        r"|^(Resource)?Scatter(Add|Sub|Mul|Div|Min|Max|Update|Nd(Add|Sub|Update))$")
DATA_OPS = re.compile(r"^(Placeholder|IteratorGetNext)")
FILE_OPS = re.compile(r"^(RestoreV2|Restore|RestoreSlice|SaveV2|Save|SaveSlices|MergeV2Checkpoints)$")   # a checkpoint's
MEAN_PREFIX = "allreduce"


@dataclass(frozen=True)
class Averaging:
    """Tensors averaged across replicas, and the update edges that read them."""

    src: np.ndarray          # int64 per tensor: producer node
    slot: np.ndarray         # int64 per tensor: output slot
    nbytes: np.ndarray       # int64 per tensor
    edges: np.ndarray        # int64: edge ids (producer -> update) that read a mean instead
    edge_tensor: np.ndarray  # int64 per edge in `edges`: its tensor

    @property
    def num_tensors(self) -> int:
        return len(self.src)


def mean_name(graph, averaging, k: int) -> str:
    """Node name of the mean of averaged tensor k (shared by the TF rewrite)."""
    return f"{MEAN_PREFIX}/{graph.names[averaging.src[k]]}/{averaging.slot[k]}"


def data_dependent(graph) -> np.ndarray:
    """Bool per node: reachable from a data source (DATA_OPS) along data edges, not
    through a checkpoint's save and restore ops (FILE_OPS): a Saver's file name is a
    PlaceholderWithDefault, but what it restores is read from the file, not the batch.

    Edge ids are sorted by source and sources precede destinations, so one pass in
    edge-id order sees every edge into a node before any edge out of it."""
    dep = np.array([bool(DATA_OPS.match(op)) for op in graph.ops], bool)
    barrier = np.array([bool(FILE_OPS.match(op)) for op in graph.ops], bool)
    data = np.flatnonzero(graph.edge_slot >= 0)
    for s, d in zip(graph.edge_src[data].tolist(), graph.edge_dst[data].tolist()):
        if dep[s] and not barrier[d]:
            dep[d] = True
    return dep


def averaged_tensors(graph) -> Averaging:
    """The data-dependent inputs of variable updates (module docstring)."""
    writer = np.array([bool(WRITER_OPS.search(op)) for op in graph.ops], bool)
    dep = data_dependent(graph)
    edges = np.flatnonzero(writer[graph.edge_dst] & dep[graph.edge_src] & (graph.edge_slot >= 0))
    keys = np.stack([graph.edge_src[edges], graph.edge_slot[edges]]).astype(np.int64)
    uniq, first, inverse = np.unique(keys, axis=1, return_index=True, return_inverse=True)
    return Averaging(uniq[0], uniq[1], graph.edge_bytes[edges[first]].astype(np.int64),
                     edges, inverse.reshape(-1).astype(np.int64))


def check_averaged(graph, source: str) -> None:
    """UserError when no tensor would be averaged: a graph without TF op names (a
    cost graph JSON from another tool) or without training updates fed by the data.
    Its replicas would train apart, and the step estimate would be one replica's."""
    if averaged_tensors(graph).num_tensors == 0:
        raise UserError(f"--replicas: {source} has no variable update that reads the data (an op such as "
                        f"ApplyAdam or AssignSubVariableOp fed from a Placeholder or IteratorGetNext), so "
                        f"nothing would be averaged across replicas; --replicas needs TF op names")

"""Pipeline-stage baselines for a step of micro-batches: GPipe and RaNNC as rows to beat.

A stage-level planner cuts the model's layers into K contiguous stages, stage s on
device s, and every micro-batch runs through the same stages:

- `gpipe` (Huang et al. 2019): K stages of equal size, here equal counts of forward
  ops; run in GPipe's order, TF's FIFO (pardnn.pipeline.schedule `fifo`).
- `rannc` (RaNNC, shared/papers 000 §III-C: stages balanced by a dynamic program over
  the layers' times; its pipeline is synchronous, 1F1B in PipeDream-2BW's sense):
  K contiguous stages of equal compute, each forward op weighted by its time and its
  backward ops' (the least largest stage of a contiguous split, up to one op); run in
  the order of the earliest micro-batch first (`early-micro-batch`), 1F1B's order.

What is a layer: the ops of micro-batch 0 (pardnn.pipeline.schedule's names,
`micro_batch_<i>/`), without the micro-batch prefix, in topological order; every
micro-batch's copy of an op goes to that op's stage. A backward op (TF's `gradients`
scope, GradientTape's `gradient_tape`) goes to the stage of the forward op whose name
its own holds (`gradients/dense/MatMul_grad/MatMul` to `dense/MatMul`'s), the longest
such name; any other op (variables, the optimizer, the combined gradients) to the
stage of its first consumer that has one, else of its producer. Colocation groups stay
whole on the stage of their first member that has one, and pinned groups go to the
nearest allowed device. On a graph without micro-batches the whole graph is the
template, so both still place any graph (the placer contract).
"""

from __future__ import annotations

import re

import numpy as np

from pardnn.graph.constraints import allowed_devices
from pardnn.graph.passes import BACKWARD, is_backward

MICRO = re.compile(r"micro_batch_\d+/")
GRAD_SUFFIX = re.compile(r"_grad(/.*)?$")


def gpipe(graph, cluster, timings=None) -> np.ndarray:
    """Device per node: K stages of equal forward-op counts (module docstring)."""
    return _staged(graph, cluster, by_time=False)


def rannc(graph, cluster, timings=None) -> np.ndarray:
    """Device per node: K contiguous stages of equal forward and backward time."""
    return _staged(graph, cluster, by_time=True)


def _staged(graph, cluster, by_time) -> np.ndarray:
    if graph.num_nodes == 0:
        return np.zeros(0, np.int32)
    layer = [MICRO.sub("", name) for name in graph.names]           # the op's name in every micro-batch
    first = np.array([name.startswith("micro_batch_0/") or "/micro_batch_0/" in name for name in graph.names])
    template = first if first.any() else np.ones(graph.num_nodes, bool)
    backward = is_backward(graph)
    forward_ids = np.flatnonzero(template & ~backward)
    key_of_forward = {layer[i]: i for i in forward_ids.tolist()}
    owner = np.array([_forward_owner(layer[i], key_of_forward) if backward[i] else -1
                      for i in range(graph.num_nodes)], np.int64)
    weight = np.ones(len(forward_ids))
    if by_time:
        position = {v: j for j, v in enumerate(forward_ids.tolist())}
        weight = graph.comp_us[forward_ids].astype(float).copy()
        for i in np.flatnonzero(template & backward & (owner >= 0)).tolist():
            weight[position[owner[i]]] += float(graph.comp_us[i])
    k = cluster.num_devices
    cum = np.cumsum(weight) - weight
    total = float(weight.sum()) or 1.0
    cut = np.minimum((cum / total * k).astype(np.int64), k - 1)
    stage_of_forward = {layer[i]: int(s) for i, s in zip(forward_ids.tolist(), cut.tolist())}
    stage = np.full(graph.num_nodes, -1, np.int64)
    for i in range(graph.num_nodes):
        key = layer[owner[i]] if backward[i] and owner[i] >= 0 else layer[i]
        if not backward[i] or owner[i] >= 0:
            stage[i] = stage_of_forward.get(key, -1)
    return _whole_groups(graph, cluster, _fill(graph, stage))


def _forward_owner(name, key_of_forward) -> int:
    """The forward op whose name a backward op's name holds (the longest), or -1."""
    plain = BACKWARD.sub("/", name).lstrip("/")
    plain = GRAD_SUFFIX.sub("", plain)
    parts = plain.split("/")
    for end in range(len(parts), 0, -1):
        found = key_of_forward.get("/".join(parts[:end]))
        if found is not None:
            return found
    return -1


def _fill(graph, stage) -> np.ndarray:
    """Stages for the ops without one: the first consumer's that has one (ids are
    topological: a backward pass over them), else the producer's, else 0."""
    stage = stage.copy()
    for v in range(graph.num_nodes - 1, -1, -1):
        if stage[v] < 0:
            succ = graph.edge_dst[graph.succ_ptr[v]:graph.succ_ptr[v + 1]]
            known = stage[succ][stage[succ] >= 0]
            if len(known):
                stage[v] = known.min()
    for v in range(graph.num_nodes):
        if stage[v] < 0:
            pred = graph.pred_src[graph.pred_ptr[v]:graph.pred_ptr[v + 1]]
            known = stage[pred][stage[pred] >= 0]
            stage[v] = known.max() if len(known) else 0
    return stage


def _whole_groups(graph, cluster, stage) -> np.ndarray:
    """Each colocation group on its first member's stage, moved to the nearest device
    its pins allow."""
    allowed = allowed_devices(graph, cluster)
    first = graph.group_nodes[graph.group_ptr[:-1]]
    out = np.empty(graph.num_groups, np.int32)
    for g, s in enumerate(stage[first].tolist()):
        options = np.flatnonzero(allowed[g])
        out[g] = options[np.argmin(np.abs(options - s))]
    return out[graph.group]

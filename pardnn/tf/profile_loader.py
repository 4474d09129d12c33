"""Profile directory -> CostGraph: `load_profile(path)`.

graph.pb (GraphDef) gives the nodes, edges and output dtypes (pardnn.tf.graphdef);
run_metadata_<i>.pb (one traced step each) give median compute times and measured
output sizes (pardnn.tf.stepstats); colocation groups come from pardnn.tf.colocation.
Every edge carries the bytes of the output slot it reads (control edges 0, slot -1).
A slot the profile did not measure falls back to its static size (shape x dtype).

Node kinds, thesis §4.1.2 "Tracking Memory Consumption":
- RESIDUAL: variables whose state survives iterations — VarHandleOp (resource
  variables, incl. optimizer slots such as Adam's m and v, which are variables too),
  VariableV2 and Variable; persist_bytes = shape x dtype from their attributes.
- REFERENCE: ops that work on a variable's own buffer and allocate nothing: any op
  with a ref-typed output (Assign, ApplyAdam, StridedSliceAssign: the thesis' example),
  an Identity reading a ref (it forwards the buffer), and ops with no outputs that
  take a ref or resource input (AssignVariableOp, ResourceApplyAdam,
  ResourceStridedSliceAssign), and ReadVariableOp: its kernel sets its output to
  the variable's own tensor (TF copies on write instead, when an update finds a read
  still holding the buffer), except for a variable that a sparse op touches, whose
  reads copy (copy-on-read mode). Their out_bytes are 0; a copy sent to another
  device still costs its bytes there (edges keep the slot's size).
- NORMAL: everything else.
out_bytes is the sum of a node's output slots, leaving out ref-typed slots (they
alias a variable, not a new allocation); persist_bytes holds the variable itself.

Pinning: an op with no GPU kernel (none registered for "GPU" or "DEFAULT") is pinned
to "CPU", where TF would run it; one with no CPU kernel (none for "CPU" or "DEFAULT":
CudnnRNN, the Nccl ops) is pinned to "GPU", so it never goes to the host device of a
`PRESET+host` cluster. This needs a TF build that registers GPU kernels
(the standard pip wheel does, even on machines without a GPU); with a CPU-only build
nothing is pinned, since nothing can be known. The profile records what the
profiling build registered (pardnn.tf.op_defs), so loading needs no TensorFlow. Pins matter only when placing on GPUs;
on a cpu:K cluster every device is a CPU.
"""

from __future__ import annotations

import json
import os
import time

import numpy as np

from pardnn.base.errors import UserError
from pardnn.graph import NORMAL, REFERENCE, RESIDUAL, CostGraph

from pardnn.tf.colocation import colocation_groups
from pardnn.tf.fusion import fusion_ties, spread_fused_times
from pardnn.tf.graphdef import graph_table, profile_files, read_graph_def, shape_bytes
import pardnn.tf.op_defs as op_registry
from pardnn.tf.protos import DT_RESOURCE
from pardnn.tf.stepstats import read_step_stats

# Ops whose access to a resource variable switches it to copy-on-read mode.
SPARSE_ACCESS = ("ResourceGather", "ResourceScatter", "ResourceSparseApply")
VARIABLE_OPS = ("VarHandleOp", "VariableV2", "Variable")


def load_profile(path):
    """(CostGraph, info) for a profile directory.

    info: nodes, edges, steps, untimed_nodes (absent from every step's step_stats:
    zero time, static sizes), outside_step_nodes (untimed and feeding no timed
    node, e.g. initializers: no memory either), unknown_stats_records, dropped_back_edges, pinned_cpu, pinned_gpu,
    fusions (pattern -> matches tied into one group, pardnn.tf.fusion),
    fused_timed_nodes (untimed nodes given a share of their fused kernel's time; they
    stay counted in untimed_nodes), stage_seconds and, when present, the profile.json written by `pardnn profile`."""
    clock = _Stages()
    graph_pb, steps = profile_files(path)
    graph_def = read_graph_def(graph_pb)
    meta = _profile_json(path)
    ops = op_registry.load(path, meta, {n.op for n in graph_def.node})
    table = graph_table(graph_def, ops, source=graph_pb)
    clock.lap("graph")
    stats = read_step_stats(steps, table)
    clock.lap("step_stats")
    slot_bytes = np.where(stats.slot_bytes >= 0, stats.slot_bytes, table.static_bytes)
    outside = ~in_step(table, stats.timed) if stats.timed.any() else np.zeros(table.num_nodes, bool)
    owner = np.repeat(np.arange(table.num_nodes), table.slot_ptr[1:] - table.slot_ptr[:-1])
    slot_bytes = np.where(outside[owner], 0, slot_bytes)
    kind, persist = node_kinds(table)
    out_bytes = _out_bytes(table, slot_bytes, kind)
    gslot = table.edge_global_slot()
    edge_bytes = np.where(gslot >= 0, slot_bytes[np.maximum(gslot, 0)], 0)
    pinned = kernel_pins(table.ops, ops.cpu_only, ops.gpu_only)
    fusions = fusion_ties(table)
    group = colocation_groups(table, fusions.ties).tolist()
    comp_us, fused_timed = spread_fused_times(stats.comp_us, stats.timed, fusions.groups)
    clock.lap("kinds_groups")
    graph = CostGraph.build(
        names=table.names, ops=table.ops, comp_us=comp_us, out_bytes=out_bytes,
        persist_bytes=persist, kind=kind, group=group, pinned=pinned, temp_bytes=stats.temp_bytes,
        edge_src=table.edge_src, edge_dst=table.edge_dst, edge_bytes=edge_bytes,
        edge_slot=table.edge_slot)
    clock.lap("build")
    info = {"nodes": graph.num_nodes, "edges": graph.num_edges, "steps": len(steps),
            "untimed_nodes": int((~stats.timed).sum()),
            "outside_step_nodes": int(outside.sum()),
            "unknown_stats_records": stats.unknown_records,
            "dropped_back_edges": table.back_edges,
            "pinned_cpu": sum(1 for p in pinned if p == "CPU"),
            "pinned_gpu": sum(1 for p in pinned if p == "GPU"),
            "fusions": fusions.counts,
            "fused_timed_nodes": fused_timed,
            "stage_seconds": clock.seconds}
    if meta is not None:
        info["profile"] = meta
    return graph, info


def node_kinds(table):
    """(kind, persist_bytes) per node; see the module docstring for the rules."""
    n = table.num_nodes
    kind = np.full(n, NORMAL, np.int8)
    persist = np.zeros(n, np.int64)
    nslots = table.slot_ptr[1:] - table.slot_ptr[:-1]
    owner = np.repeat(np.arange(n), nslots)
    ref_out = np.bincount(owner[table.slot_ref], minlength=n) > 0
    gslot = table.edge_global_slot()
    data = gslot >= 0
    ref_in = np.zeros(n, bool)
    res_in = np.zeros(n, bool)
    ref_in[table.edge_dst[data][table.slot_ref[gslot[data]]]] = True
    res_in[table.edge_dst[data][table.slot_dtype[gslot[data]] == DT_RESOURCE]] = True
    ops = np.asarray(table.ops, dtype=object)
    aliases = ref_out | ((ops == "Identity") & ref_in) | ((nslots == 0) & (ref_in | res_in))
    kind[aliases | _aliasing_reads(table, ops)] = REFERENCE
    for i in np.flatnonzero(np.isin(ops, VARIABLE_OPS)).tolist():
        kind[i] = RESIDUAL
        attr = table.graph_def.node[i].attr
        if "shape" in attr and "dtype" in attr:
            persist[i] = shape_bytes(attr["shape"].shape, attr["dtype"].type % 100)
    return kind, persist


def _aliasing_reads(table, ops) -> np.ndarray:
    """ReadVariableOps that hand out their variable's buffer: all but the reads of a
    variable some sparse op touches (ResourceGather, ResourceScatter*, a sparse
    apply), which puts the variable in copy-on-read mode. Measured: in a word-rnn
    profile two reads of one kernel report the same buffer and no allocation, while
    reads of the embedding (gathered) each allocate their own."""
    sparse = np.array([op.startswith(SPARSE_ACCESS) for op in ops.tolist()], bool)
    src, dst = table.edge_src, table.edge_dst
    gathered = np.zeros(table.num_nodes, bool)
    gathered[src[sparse[dst]]] = True
    reads = ops == "ReadVariableOp"
    copying = np.zeros(table.num_nodes, bool)
    copying[dst[reads[dst] & gathered[src]]] = True
    return reads & ~copying


def in_step(table, timed) -> np.ndarray:
    """Nodes a traced training step runs: the timed ones and all their ancestors.

    A GraphDef also holds nodes no training step executes — variable initializers,
    save/restore ops. They never appear in step_stats and never allocate during a
    step, so their outputs cost no memory (their slots get 0 bytes). An untimed node
    that feeds a timed one did run (its stats were just not recorded) and keeps its
    static sizes. Reverse reachability over all edges, control edges included: O(V + E)."""
    n = table.num_nodes
    order = np.argsort(table.edge_dst, kind="stable")
    ptr = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(table.edge_dst, minlength=n), out=ptr[1:])
    preds, ptr = table.edge_src[order].tolist(), ptr.tolist()
    seen = timed.tolist()
    stack = np.flatnonzero(timed).tolist()
    while stack:
        v = stack.pop()
        for u in preds[ptr[v]:ptr[v + 1]]:
            if not seen[u]:
                seen[u] = True
                stack.append(u)
    return np.asarray(seen, bool)


def _out_bytes(table, slot_bytes, kind):
    n = table.num_nodes
    owner = np.repeat(np.arange(n), table.slot_ptr[1:] - table.slot_ptr[:-1])
    keep = ~table.slot_ref
    out = np.bincount(owner[keep], weights=slot_bytes[keep], minlength=n).astype(np.int64)
    out[kind == REFERENCE] = 0
    return out


def kernel_pins(ops, cpu_only, gpu_only=None) -> list:
    """"CPU" for nodes whose op is in `cpu_only` (has kernels, none for GPU), "GPU" for
    those in `gpu_only` (none for CPU); "" for the rest. None for either set: unknown,
    nothing pinned to that kind."""
    cpu_only, gpu_only = cpu_only or (), gpu_only or ()
    return ["CPU" if op in cpu_only else "GPU" if op in gpu_only else "" for op in ops]


class _Stages:
    """Wall time per loading stage, for info["stage_seconds"]."""

    def __init__(self):
        self.seconds = {}
        self._last = time.perf_counter()

    def lap(self, stage):
        now = time.perf_counter()
        self.seconds[stage] = now - self._last
        self._last = now


def _profile_json(path):
    meta_path = os.path.join(path, "profile.json")
    if not os.path.isfile(meta_path):
        return None
    try:
        with open(meta_path) as f:
            return json.load(f)
    except (OSError, ValueError) as exc:
        raise UserError(f"{meta_path}: not readable JSON ({exc})") from None

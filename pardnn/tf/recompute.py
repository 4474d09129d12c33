"""Recomputed ops carried into TensorFlow, and which ops may be recomputed at all.

A CostGraph with recomputation (pardnn.graph.recompute) holds a copy node
`pardnn_recompute/X` for each forward op X run a second time in the backward pass.
Its edges say everything TF needs: a data edge (copy(P), k) -> copy(X) makes the
copy read the other copy's output instead of P's kept one; a control edge T ->
copy(X) is the backward op (the trigger) the copy waits for, so it runs just before
its first reader and not at forward time; a data edge (copy(X), k) -> C makes the
reader C read copy(X):k instead of X:k. pardnn.graph.recompute's `recompute_rows`
lists those edges (what recompute.csv holds beside placement.csv), `rewiring` turns
them into what to do, and `add_copies` does it to a GraphDef (placed_graph.pb);
pardnn.tf.recompute_trace does it to a traced tf.function. A copy's NodeDef is its
original's, renamed, with the same attrs (so the same colocation `_class`) and MARK,
its inputs mapped and `^T` added: Grappler's CSE compares all of these, so it never
merges a copy back into its original (docs/algorithm.md, "Recomputation").

Only ops whose second run gives the first run's values may be recomputed:
`not_recomputable` says why each other op may not: stateful by its OpDef (e.g.
RandomUniform, even with a seed: its second call draws other numbers); reads a
variable's ref or resource, or a ref variable's `read` Identity (its tensor is the
variable's buffer, which the update may have changed by the second run); control
flow, or inside a TF1 loop or cond; no data inputs; no OpDef known. Stateless random
ops (`StatelessRandom*`) take their seed as an input and give the same values again,
so they may. Nothing here imports TensorFlow: the OpDefs come from the profile
(pardnn.tf.op_defs).
"""

from __future__ import annotations

import json
import os
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from pardnn.base.errors import UserError
from pardnn.graph.recompute import original_name, recompute_rows
import pardnn.tf.op_defs as op_registry
from pardnn.tf.graphdef import FUNCTIONAL_OPS, graph_table, read_graph_def
from pardnn.tf.protos import DT_RESOURCE

MARK = "_pardnn_recompute"      # a copy's attr naming its original: no CSE merges the two

_CONTROL_FLOW = frozenset({"Enter", "RefEnter", "Exit", "RefExit", "Switch", "RefSwitch", "Merge",
                           "RefMerge", "NextIteration", "RefNextIteration", "LoopCond", "ControlTrigger"})
_FRAME_OPENERS = _CONTROL_FLOW - {"Exit", "RefExit"}
READS = ("ReadVariableOp",)         # a resource variable's read: may be read again (`rereads`)
_READ_ONLY = READS + ("VarIsInitializedOp", "VariableShape", "ResourceGather", "ResourceGatherNd")


@dataclass
class Rewiring:
    """What recomputation changes in a TF graph, by op name."""

    originals: dict = field(default_factory=dict)   # copy -> the op it copies
    inputs: dict = field(default_factory=dict)      # copy or reader -> {(op, slot): copy read instead}
    triggers: dict = field(default_factory=dict)    # copy or other op -> [ops it waits for, added]


def rewiring(rows) -> Rewiring:
    """The Rewiring the edge rows of `recompute_rows` (or recompute.csv) describe."""
    out = Rewiring()
    for producer, slot, consumer in rows:
        for name in (producer, consumer):
            if original_name(name) is not None:
                out.originals[name] = original_name(name)
        copied = original_name(producer)
        if slot < 0:
            out.triggers.setdefault(consumer, []).append(producer)
        elif copied is not None:
            out.inputs.setdefault(consumer, {})[(copied, slot)] = producer
    return out


def carry_recompute(profile_dir, graph_def, graph, source="graph.pb") -> None:
    """Add the copies `graph` (a CostGraph of the profile in `profile_dir`) has to
    its `graph_def` and rewire their readers; UserError naming an op copied that may
    not be recomputed. Nothing changes for a graph without copies."""
    rows = recompute_rows(graph)
    if not rows:
        return
    plan = rewiring(rows)
    refused = not_recomputable(graph_def, profile_op_defs(profile_dir, graph_def))
    for read, why in rereads(graph).items():
        if why is None:
            refused.pop(read, None)
        else:
            refused[read] = why
    check_recomputable(plan.originals.values(), refused, source)
    add_copies(graph_def, plan, source)


def rereads(graph) -> dict:
    """{read: why it may not be read again, or None where it may} for the variable
    reads (`READS`) that `graph` (a CostGraph with copies) reads a second time
    (pardnn.graph.host_fetch). A second read gives the first one's value when every
    write of the variable that comes after the first read (reachable from it) waits
    for the second read too: else the backward pass could get the updated weights."""
    index = graph.index()
    out = {}
    for copy, name in enumerate(graph.names):
        original = original_name(name)
        if original is None or graph.ops[copy] not in READS or original not in index:
            continue
        first = index[original]
        eids = graph.pred_eid[graph.pred_ptr[first]:graph.pred_ptr[first + 1]]
        handles = graph.edge_src[eids[graph.edge_slot[eids] >= 0]].tolist()
        writes = {w for h in handles for w in graph.successors(h).tolist()
                  if graph.ops[w] not in _READ_ONLY and original_name(graph.names[w]) is None}
        missed = [graph.names[w] for w in sorted(writes) if _reaches(graph, first, w) and not _reaches(graph, copy, w)]
        out[original] = (f"{graph.ops[copy]} is read again, but the variable's write {missed[0]!r} does not "
                         f"wait for the second read" if missed else None)
    return out


def _reaches(graph, a, b) -> bool:
    """Whether a path of `graph` leads from node a to node b (ids are topological, so
    nodes after b are not followed)."""
    seen = np.zeros(graph.num_nodes, bool)
    frontier = np.array([a], np.int64)
    while len(frontier) and not seen[b]:
        seen[frontier] = True
        nxt = np.concatenate([graph.edge_dst[graph.succ_ptr[u]:graph.succ_ptr[u + 1]] for u in frontier.tolist()])
        frontier = np.unique(nxt[(nxt <= b) & ~seen[nxt]]).astype(np.int64)
    return bool(seen[b])


def add_copies(graph_def, plan: Rewiring, source="graph.pb") -> None:
    """Add each copy of `plan` to `graph_def` (a pardnn.tf.protos GraphDef) as its
    original's NodeDef renamed, and point the readers' inputs at the copies."""
    nodes = {node.name: node for node in graph_def.node}
    for copy, original in plan.originals.items():
        if original not in nodes:
            raise UserError(f"{source}: recomputed op {original!r} is not in the graph "
                            f"(graph.pb changed since it was loaded?)")
        node = graph_def.node.add()
        node.CopyFrom(nodes[original])
        node.name = copy
        node.attr[MARK].s = original.encode()
        nodes[copy] = node
    for name, mapping in plan.inputs.items():
        if name not in nodes:
            raise UserError(f"{source}: op {name!r}, which reads a recomputed op, is not in the graph")
        nodes[name].input[:] = [mapped_input(text, mapping) for text in nodes[name].input]
    for name, waits in plan.triggers.items():
        if name not in nodes:
            raise UserError(f"{source}: op {name!r}, which waits for a recomputed op, is not in the graph")
        nodes[name].input.extend(w for w in dict.fromkeys("^" + t for t in waits) if w not in nodes[name].input)
    for copy, original in plan.originals.items():
        nodes[copy].input.extend(twin_wait(nodes[copy].input, nodes[original].input, original))


def twin_wait(inputs, original_inputs, original) -> list:
    """["^original"] for a copy whose inputs (data and control, as texts) are its
    original's: a copy with no trigger that reads no other copy. Grappler would merge
    such a twin back into its original (the remapper fuses MatMul+BiasAdd+Relu copies
    into a node without the copy's attrs, which CSE then finds equal to the fused
    original); waiting for the original makes them differ, and changes nothing else,
    since the copy's inputs are the original's."""
    return [f"^{original}"] if sorted(inputs) == sorted(original_inputs) else []


def mapped_input(text: str, mapping: dict) -> str:
    """A NodeDef input `P`, `P:k` or `^P`, with the tensor (P, k) read from
    mapping[(P, k)] where mapping names a copy for it."""
    if text.startswith("^"):
        return text
    name, sep, tail = text.rpartition(":")
    if not sep or not tail.isdigit():
        name, tail = text, "0"
    copy = mapping.get((name, int(tail)))
    if copy is None:
        return text
    return copy if tail == "0" and not sep else f"{copy}:{tail}"


def not_recomputable(graph_def, op_defs) -> dict:
    """{op name: why it may not be recomputed} for the ops of `graph_def` whose second
    run might not give the first one's values (module docstring); op_defs: the ops'
    OpDefs (pardnn.tf.op_defs.OpDefs)."""
    table = graph_table(graph_def, op_defs)
    gslot = table.edge_global_slot()
    data = gslot >= 0
    reads_state = np.zeros(table.num_nodes, bool)
    state = table.slot_ref[gslot[data]] | (table.slot_dtype[gslot[data]] == DT_RESOURCE)
    reads_state[table.edge_dst[data][state]] = True
    alias = reads_state & (np.asarray(table.ops, dtype=object) == "Identity")   # a ref variable's `v/read`
    reads_state[table.edge_dst[data][alias[table.edge_src[data]]]] = True
    has_input = np.bincount(table.edge_dst[data], minlength=table.num_nodes) > 0
    in_frame = _in_loop_or_cond(table)
    why = {}
    for i, (name, op) in enumerate(zip(table.names, table.ops)):
        op_def = op_defs.get(op)
        if op_def is None:
            why[name] = f"{op} has no known OpDef"
        elif op_def.is_stateful:
            why[name] = f"{op} is stateful (a second run may give other values)"
        elif op in FUNCTIONAL_OPS or op in _CONTROL_FLOW or in_frame[i]:
            why[name] = f"{op} is control flow or runs inside a loop or cond"
        elif reads_state[i]:
            why[name] = f"{op} reads a variable"
        elif not has_input[i]:
            why[name] = f"{op} has no data inputs"
    return why


def _in_loop_or_cond(table) -> np.ndarray:
    """bool per node: downstream of a TF1 loop's or cond's frame op (Enter, Switch,
    Merge...) without an Exit between: it runs in the frame (or after a cond, kept
    out to be safe). Back edges are already dropped, so the graph is a DAG."""
    n = table.num_nodes
    order = np.argsort(table.edge_src, kind="stable")
    src, dst = table.edge_src[order], table.edge_dst[order]
    ptr = np.searchsorted(src, np.arange(n + 1))
    indegree = np.bincount(dst, minlength=n)
    marked = np.array([op in _FRAME_OPENERS for op in table.ops], bool)
    exits = np.array([op in ("Exit", "RefExit") for op in table.ops], bool)
    ready = deque(np.flatnonzero(indegree == 0).tolist())
    while ready:
        u = ready.popleft()
        for v in dst[ptr[u]:ptr[u + 1]].tolist():
            if marked[u] and not exits[u]:
                marked[v] = True
            indegree[v] -= 1
            if indegree[v] == 0:
                ready.append(v)
    return marked & ~exits


def profile_op_defs(profile_dir, graph_def):
    """The OpDefs of graph_def's ops as the profile in `profile_dir` recorded them."""
    meta_path = os.path.join(str(profile_dir), "profile.json")
    meta = None
    if os.path.isfile(meta_path):
        try:
            with open(meta_path) as f:
                meta = json.load(f)
        except (OSError, ValueError) as exc:
            raise UserError(f"{meta_path}: not readable JSON ({exc})") from None
    return op_registry.load(profile_dir, meta, {n.op for n in graph_def.node})


def recomputable(profile_dir) -> set:
    """Names of the ops of a profile dir's graph.pb that may be recomputed (module
    docstring), by the OpDefs the profile recorded."""
    graph_def = read_graph_def(os.path.join(str(profile_dir), "graph.pb"))
    refused = not_recomputable(graph_def, profile_op_defs(profile_dir, graph_def))
    return {node.name for node in graph_def.node} - set(refused)


def check_recomputable(originals, refused: dict, source: str) -> None:
    """UserError naming the first of `originals` (ops asked to be recomputed) that
    `refused` (from `not_recomputable`) says may not be, and why."""
    for name in originals:
        if name in refused:
            raise UserError(f"{source}: cannot recompute op {name!r}: {refused[name]}")

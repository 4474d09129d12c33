"""Colocation groups: the nodes TensorFlow insists on running on one device.

Union-find over four kinds of ties (docs/profiles.md, "Loading one": "Colocation
groups"):
- `_class: loc:@x` attributes (what `colocate_with` and optimizer slots write);
- ref- and resource-typed edges: TF's placer colocates every consumer of a ref or
  a resource handle with its producer, so a VarHandleOp joins its readers
  (ReadVariableOp), its updaters (ResourceApplyAdam, AssignVariableOp) and any
  Identity/Enter the handle flows through; but not a branch or a call (If, Case, a
  function call: graphdef.FUNCTIONAL_OPS but the loops) the handle enters: the
  session lowers it first, and each op of its body that uses the handle runs with
  that variable (an If on one device updating variables on two others runs so
  under TF's default config), so such an op ties no variables together (a
  LossScaleOptimizer's tf.cond takes every variable's handle); unless it returns a
  handle, whose readers TF places with the variable behind it. A While stays tied
  to its variables: its body would read a variable elsewhere on every iteration,
  transfers the emulator, which sees the loop as one op, could not count. So does a
  call XLA must compile (`_XlaMustCompile`: Keras' grouped convolution on a CPU
  calls one): it runs as one cluster on one device, which XLA refuses unless that
  device holds every variable it takes;
- TF1 while-loop frames: every node inside an Enter..Exit frame (at any nesting
  depth) joins its frame's group, so a loop is never split across devices. Nested
  frames end up in their outermost frame's group;
- the nodes of a pattern Grappler's remapper fuses into one kernel
  (pardnn.tf.fusion), passed in as `extra_ties`: TF would run them where the
  pattern's first node runs, whatever the placement says.
"""

from __future__ import annotations

import itertools
from collections import deque

import numpy as np

from pardnn.tf.graphdef import FUNCTIONAL_OPS
from pardnn.tf.protos import DT_RESOURCE

_ENTER = ("Enter", "RefEnter")
_EXIT = ("Exit", "RefExit")


def colocation_groups(table, extra_ties=()) -> np.ndarray:
    """Group label (a representative node id) for every node of the GraphTable;
    `extra_ties` are more (node id, node id) pairs to keep together."""
    parent = list(range(table.num_nodes))
    for a, b in itertools.chain(_class_ties(table), extra_ties):
        _union(parent, a, b)
    gslot = table.edge_global_slot()
    data = gslot >= 0
    tied = np.zeros(len(gslot), bool)
    tied[data] = table.slot_ref[gslot[data]] | (table.slot_dtype[gslot[data]] == DT_RESOURCE)
    run_once = np.fromiter((op in FUNCTIONAL_OPS and "While" not in op and not _compiled(node)
                            for op, node in zip(table.ops, table.graph_def.node)), bool, table.num_nodes)
    owner = np.repeat(np.arange(table.num_nodes), table.slot_ptr[1:] - table.slot_ptr[:-1])
    run_once[owner[table.slot_dtype == DT_RESOURCE]] = False     # it hands a variable on: stays with it
    tied &= ~run_once[table.edge_dst]
    for a, b in zip(table.edge_src[tied].tolist(), table.edge_dst[tied].tolist()):
        _union(parent, a, b)
    if any(op in _ENTER for op in table.ops):
        depth = frame_depths(table)
        inner = (depth[table.edge_src] > 0) & (depth[table.edge_dst] > 0)
        for a, b in zip(table.edge_src[inner].tolist(), table.edge_dst[inner].tolist()):
            _union(parent, a, b)
    return np.fromiter((_find(parent, i) for i in range(table.num_nodes)), np.int64, table.num_nodes)


def _compiled(node) -> bool:
    """Whether XLA must compile this call as one cluster (it is not lowered)."""
    return "_XlaMustCompile" in node.attr and node.attr["_XlaMustCompile"].b


def _class_ties(table):
    index = table.index
    for i, node in enumerate(table.graph_def.node):
        if "_class" in node.attr:
            for entry in node.attr["_class"].list.s:
                j = index.get(entry.decode(errors="replace").removeprefix("loc:@"))
                if j is not None:
                    yield i, j


def frame_depths(table) -> np.ndarray:
    """Loop-frame nesting depth each node executes in (0 = outside every loop).

    An Enter runs one frame deeper than its input; the consumers of an Exit run one
    frame shallower than the Exit; everything else runs in its input's frame. All
    inputs of a well-formed node agree, so a breadth-first sweep from the sources
    (over the DAG without back edges) sets each depth on first visit: O(V + E)."""
    n = table.num_nodes
    order = np.argsort(table.edge_src, kind="stable")
    ptr = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(table.edge_src, minlength=n), out=ptr[1:])
    succ, ptr = table.edge_dst[order].tolist(), ptr.tolist()
    ops = table.ops
    depth = [-1] * n
    has_input = np.zeros(n, bool)
    has_input[table.edge_dst] = True
    queue = deque(int(i) for i in np.flatnonzero(~has_input))
    for i in queue:
        depth[i] = 1 if ops[i] in _ENTER else 0
    while queue:
        u = queue.popleft()
        out = depth[u] - 1 if ops[u] in _EXIT else depth[u]
        for v in succ[ptr[u]:ptr[u + 1]]:
            if depth[v] < 0:
                depth[v] = out + 1 if ops[v] in _ENTER else out
                queue.append(v)
    return np.maximum(np.asarray(depth, np.int64), 0)


def _find(parent, i):
    while parent[i] != i:
        parent[i] = parent[parent[i]]
        i = parent[i]
    return i


def _union(parent, a, b):
    ra, rb = _find(parent, a), _find(parent, b)
    if ra != rb:
        parent[max(ra, rb)] = min(ra, rb)

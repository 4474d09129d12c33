"""Read a serialized GraphDef and turn it into arrays: node names and ops, output
slots with their dtypes and static sizes, and the edge list.

Output slots are numbered globally: node i owns slots `slot_ptr[i]:slot_ptr[i+1]`,
so per-slot data (dtype, ref flag, bytes) lives in flat arrays, not per-node dicts.
A slot's dtype comes from the op's OpDef (as the profiling TensorFlow registered it,
pardnn.tf.op_defs) expanded with the node's attributes (type_attr, type_list_attr,
number_attr), exactly as TF derives it; an op with no OpDef (a custom op whose
library was not loaded) gets as many slots as its consumers and `_output_shapes`
reveal, with unknown dtype.

Static sizes (the fallback for tensors the profile did not measure) come from the
`_output_shapes` attribute that `graph.as_graph_def(add_shapes=True)` writes, or from
a `shape`+`dtype`/`value` attribute (Placeholder, variables, Const). A dimension
unknown before run time makes the size 0: it cannot be known statically.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
from google.protobuf.message import DecodeError

from pardnn.base.errors import UserError
from pardnn.tf.protos import DTYPE_SIZE, GraphDef

# Functional control flow and calls (TF 2's tf.while_loop / tf.cond, in TF1-style graphs
# too): a session lowers each into nodes of its own, named under the node's name, before
# it places them (pardnn.tf.stepstats charges their time; pardnn.tf.colocation their ties)
FUNCTIONAL_OPS = frozenset({"While", "StatelessWhile", "If", "StatelessIf", "Case", "StatelessCase",
                            "PartitionedCall", "StatefulPartitionedCall"})
_BACK_EDGE_SRC = ("NextIteration", "RefNextIteration")


@dataclass
class GraphTable:
    """A GraphDef as arrays over node ids (GraphDef order, not yet topological)."""

    graph_def: object
    names: list
    ops: list
    index: dict                  # name -> id, used once to resolve inputs and stats
    slot_ptr: np.ndarray         # int64 (n+1): output slots of node i
    slot_dtype: np.ndarray       # int32 DataType enum (base type), 0 if unknown
    slot_ref: np.ndarray         # bool: ref-typed output (aliases a variable's buffer)
    static_bytes: np.ndarray     # int64 per slot, 0 if unknown
    edge_src: np.ndarray
    edge_dst: np.ndarray
    edge_slot: np.ndarray        # -1 for control edges
    back_edges: int              # NextIteration -> Merge edges dropped

    @property
    def num_nodes(self) -> int:
        return len(self.names)

    def edge_global_slot(self) -> np.ndarray:
        """Global slot id of each data edge's tensor (-1 for control edges)."""
        data = self.edge_slot >= 0
        return np.where(data, self.slot_ptr[self.edge_src] + self.edge_slot, -1)


def read_graph_def(path):
    """Parse graph.pb; UserError naming the file if it is not a usable GraphDef."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as exc:
        raise UserError(f"{path}: cannot read ({exc.strerror})") from None
    graph_def = GraphDef()
    try:
        graph_def.ParseFromString(data)
    except (DecodeError, RuntimeError, ValueError):
        raise UserError(f"{path}: not a serialized GraphDef (truncated or another format)") from None
    if not graph_def.node or any(not n.name or not n.op for n in graph_def.node):
        raise UserError(f"{path}: not a serialized GraphDef (no nodes, or nodes without name/op)")
    return graph_def


def graph_table(graph_def, op_defs, source="graph.pb") -> GraphTable:
    """Arrays for a parsed GraphDef; UserError on duplicate names or dangling inputs.
    op_defs: the ops' OpDefs (pardnn.tf.op_defs)."""
    names = [n.name for n in graph_def.node]
    index = {name: i for i, name in enumerate(names)}
    if len(index) != len(names):
        dup = next(x for i, x in enumerate(names) if index[x] != i)
        raise UserError(f"{source}: duplicate node name {dup!r}")
    src, dst, slot = _edges(graph_def, index, source)
    ops = [n.op for n in graph_def.node]
    src, dst, slot, back = _drop_back_edges(ops, src, dst, slot)
    slot_ptr, dtype, ref, static = _slots(graph_def, op_defs, src, slot)
    return GraphTable(graph_def, names, ops, index, slot_ptr, dtype, ref, static,
                      src, dst, slot, back)


def _edges(graph_def, index, source):
    src, dst, slot = [], [], []
    for i, node in enumerate(graph_def.node):
        for text in node.input:
            if text.startswith("^"):
                name, k = text[1:], -1
            else:
                name, sep, tail = text.rpartition(":")
                if not sep or not tail.isdigit():
                    name, k = text, 0
                else:
                    k = int(tail)
            j = index.get(name)
            if j is None:
                raise UserError(f"{source}: node {node.name!r} reads {text!r}, which is not in the graph")
            src.append(j)
            dst.append(i)
            slot.append(k)
    return (np.asarray(src, np.int64), np.asarray(dst, np.int64), np.asarray(slot, np.int64))


def _drop_back_edges(ops, src, dst, slot):
    """Drop TF1 while-loop back edges NextIteration -> Merge (docs/profiles.md, "Loading one")."""
    op_arr = np.asarray(ops, dtype=object)
    back = (np.isin(op_arr[src], _BACK_EDGE_SRC) & np.isin(op_arr[dst], ("Merge", "RefMerge"))
            if len(src) else np.zeros(0, bool))
    keep = ~back
    return src[keep], dst[keep], slot[keep], int(back.sum())


def _slots(graph_def, op_defs, edge_src, edge_slot):
    """Per-node output slot counts, dtypes, ref flags and static byte sizes."""
    n = len(graph_def.node)
    used = np.zeros(n, np.int64)
    data = edge_slot >= 0
    np.maximum.at(used, edge_src[data], edge_slot[data] + 1)
    counts, dtypes, refs, sizes = [], [], [], []
    for i, node in enumerate(graph_def.node):
        types = _output_types(node, op_defs.get(node.op))
        shapes = node.attr["_output_shapes"].list.shape if "_output_shapes" in node.attr else ()
        count = max(len(types), len(shapes), int(used[i]))
        types = types + [(0, False)] * (count - len(types))
        counts.append(count)
        for k, (dtype, is_ref) in enumerate(types):
            dtypes.append(dtype)
            refs.append(is_ref)
            sizes.append(_static_bytes(node, shapes[k] if k < len(shapes) else None, dtype, k))
    slot_ptr = np.zeros(n + 1, np.int64)
    np.cumsum(counts, out=slot_ptr[1:])
    return (slot_ptr, np.asarray(dtypes, np.int32), np.asarray(refs, bool),
            np.asarray(sizes, np.int64))


def _output_types(node, op_def):
    """[(base dtype, is_ref)] per output, from the op's OpDef and the node's attrs."""
    if op_def is None:
        return []
    out = []
    for arg in op_def.output_arg:
        count = _attr(node, op_def, arg.number_attr).i if arg.number_attr else 1
        if arg.type_list_attr:
            types = list(_attr(node, op_def, arg.type_list_attr).list.type)
        elif arg.type_attr:
            types = [_attr(node, op_def, arg.type_attr).type] * count
        else:
            types = [arg.type] * count
        out.extend((t % 100, arg.is_ref or t > 100) for t in types)
    return out


def _attr(node, op_def, name):
    """A node attribute, or the OpDef default when the GraphDef left it out."""
    if name in node.attr:
        return node.attr[name]
    for attr in op_def.attr:
        if attr.name == name:
            return attr.default_value
    raise UserError(f"graph.pb: node {node.name!r} ({node.op}) lacks attribute {name!r}")


def _static_bytes(node, shape, dtype, slot):
    """Bytes of output `slot` known before running: shape x dtype size, else 0."""
    if shape is None and slot == 0:
        if "value" in node.attr and node.op == "Const":
            shape = node.attr["value"].tensor.tensor_shape
        elif "shape" in node.attr and node.op in ("Placeholder", "PlaceholderWithDefault"):
            shape = node.attr["shape"].shape
    return shape_bytes(shape, dtype)


def shape_bytes(shape, dtype) -> int:
    """Bytes of a fully known TensorShapeProto of `dtype`; 0 when anything is unknown."""
    if shape is None or shape.unknown_rank or not 0 < dtype < len(DTYPE_SIZE):
        return 0
    total = int(DTYPE_SIZE[dtype])
    for dim in shape.dim:
        if dim.size < 0:
            return 0
        total *= dim.size
    return total


def profile_files(path):
    """(graph.pb path, [run_metadata_<i>.pb paths in step order]) of a profile dir."""
    graph_pb = os.path.join(path, "graph.pb")
    if not os.path.isfile(graph_pb):
        raise UserError(f"{path}: no graph.pb (a profile directory holds graph.pb and run_metadata_<i>.pb)")
    steps = []
    for name in os.listdir(path):
        stem = name[len("run_metadata_"):-len(".pb")]
        if name.startswith("run_metadata_") and name.endswith(".pb") and stem.isdigit():
            steps.append((int(stem), os.path.join(path, name)))
    if not steps:
        raise UserError(f"{path}: no run_metadata_<i>.pb (profile at least one traced step)")
    return graph_pb, [p for _, p in sorted(steps)]

"""One GraphDef for the distributed runtime holding R replicas of a placed graph, with
the batch-dependent inputs of variable updates averaged in-graph across replicas
(`pardnn place --replicas R`; what is averaged, and why, is in pardnn.graph.averaging).

Replica r is the placed graph with every node renamed `replica_<r>/<name>` and its
device moved to replica r's (pardnn.hardware.hosts.replica_devices): from the first
host's task to host r's (`/job:worker/task:0/device:GPU:1` becomes
`/job:worker/task:r/device:GPU:1`), or on one host from device j of the first group to
device j of group r (with 8 GPUs and 2 replicas, GPU:1 becomes GPU:5). Names that TF resolves per graph are
prefixed too: colocation (`_class: loc:@...`), resource `shared_name`s, while-loop
`frame_name`s and TensorArray names, so the replicas share nothing by accident.
Random ops with neither a graph nor an op seed get one fixed seed (the same in every
replica, from the op's name), so that every replica initialises its variables to the
same values; seeded ops keep their seeds and are equal across replicas already.

For averaged tensor k (pardnn.graph.averaging.averaged_tensors) three nodes are added on
the update's device in replica k mod R: `<mean>/sum` (AddN over the replicas'
tensors), `<mean>/count` (R) and `<mean>` (their quotient), where <mean> is
pardnn.graph.averaging.mean_name; every replica's update reads `<mean>`. Only floating
tensors can be averaged: an update fed batch-dependent integers (the indices of a
sparse update) is refused with a UserError.

When the profile names them (profile.json: train_op, loss, init), top-level nodes
with the original names join the replicas: `train` runs every replica's train op,
`loss:0` is the mean of the replicas' losses, `init` initialises every replica.
Each replica is fed through its own placeholders, `replica_<r>/<placeholder>`.
"""

from __future__ import annotations

import os
import zlib

import pardnn.tf.quiet_import  # noqa: F401  (first: hides TensorFlow's start-up lines)
from tensorflow.core.framework import graph_pb2, node_def_pb2, types_pb2
from tensorflow.python.framework import tensor_util

from pardnn.base.errors import UserError
from pardnn.graph.averaging import averaged_tensors, mean_name
from pardnn.graph.order import control_inputs
from pardnn.hardware.hosts import replica_devices
from pardnn.tf.graphdef import graph_table, read_graph_def
from pardnn.tf.op_defs import from_tensorflow
from pardnn.tf.placed_graph import placed_devices
from pardnn.tf.protos import to_tensorflow

PREFIXED_ATTRS = ("shared_name", "frame_name", "tensor_array_name")
FLOAT_TYPES = {types_pb2.DT_HALF, types_pb2.DT_BFLOAT16, types_pb2.DT_FLOAT, types_pb2.DT_DOUBLE,
               types_pb2.DT_COMPLEX64, types_pb2.DT_COMPLEX128}


def write_replicated_graph(profile_path, graph, placement, cluster, replicas, names, out_path, order=None) -> None:
    """Write the replicated graph of graph.pb in `profile_path` to `out_path`.

    `placement` is on the first replica's devices; `cluster` has all of them; `names`
    may hold the profile's train_op, loss and init names; `order` (an Order of
    `graph`), the control edges each replica carries."""
    graph_def = read_graph_def(os.path.join(str(profile_path), "graph.pb"))
    out = replicate(graph_def, graph, placement, cluster, replicas, names, order)
    with open(out_path, "wb") as f:
        f.write(out.SerializeToString())


def replicate(graph_def, graph, placement, cluster, replicas, names=None, order=None):
    """The replicated GraphDef (module docstring); each replica carries the control
    edges of `order` (a pardnn.graph.order.Order of `graph`), as `^replica_<r>/before`
    inputs of `replica_<r>/after`."""
    moved = _replica_device(cluster, replica_devices(cluster, replicas))
    index = graph.index()
    devices = placed_devices(graph, placement)
    averaging = averaged_tensors(graph)
    means = _mean_inputs(graph, averaging)
    graph_def = to_tensorflow(graph_def, graph_pb2.GraphDef)
    table = graph_table(graph_def, from_tensorflow({n.op for n in graph_def.node}))

    def dtype_of(name, slot):
        return int(table.slot_dtype[table.slot_ptr[table.index[name]] + slot])

    dtypes = _averaged_dtypes(graph, averaging, dtype_of)
    out = graph_pb2.GraphDef()
    out.versions.CopyFrom(graph_def.versions)
    out.library.CopyFrom(graph_def.library)
    waits = control_inputs(graph, order)
    for r in range(replicas):
        for node in graph_def.node:
            if node.name not in index:
                raise UserError(f"graph.pb: node {node.name!r} is not in the cost graph "
                                f"(graph.pb changed since it was loaded?)")
            copy = _copy(node, f"replica_{r}/", moved(devices[index[node.name]], r), means)
            copy.input.extend(_prefixed_input(w, f"replica_{r}/") for w in waits.get(node.name, ())
                              if w not in node.input)
            out.node.append(copy)
    for k in range(averaging.num_tensors):
        owner = k % replicas
        writer = graph.edge_dst[averaging.edges[averaging.edge_tensor == k][0]]
        tensor = f"{graph.names[averaging.src[k]]}:{averaging.slot[k]}"
        out.node.extend(_mean_nodes(mean_name(graph, averaging, k),
                                    [f"replica_{r}/{tensor}" for r in range(replicas)],
                                    dtypes[k], moved(devices[writer], owner)))
    known = {key: value for key, value in (names or {}).items()
             if isinstance(value, str) and value.split(":")[0] in index}
    out.node.extend(_joins(known, replicas, dtype_of, lambda name: devices[index[name]]))
    return out


def _replica_device(cluster, table):
    """moved(device, r): the device string `device` of the placement (on replica 0's
    devices) as replica r runs it: replica r's device of the same place in `table`, or,
    for a device the cluster does not list, the same device on replica r's host."""
    names = cluster.names
    tasks = [cluster.hosts[cluster.devices[row[0]].host].task for row in table]
    own = [{names[a]: names[b] for a, b in zip(table[0], row)} for row in table]

    def moved(device, r):
        if device in own[r]:
            return own[r][device]
        return tasks[r] + device[len(tasks[0]):] if device.startswith(tasks[0] + "/") else device
    return moved


def _mean_inputs(graph, averaging) -> dict:
    """{(update node name, input tensor "src:slot"): mean node name}."""
    out = {}
    for e, k in zip(averaging.edges.tolist(), averaging.edge_tensor.tolist()):
        tensor = f"{graph.names[graph.edge_src[e]]}:{graph.edge_slot[e]}"
        out[graph.names[graph.edge_dst[e]], tensor] = mean_name(graph, averaging, k)
    return out


def _averaged_dtypes(graph, averaging, dtype_of) -> list:
    """DataType of each averaged tensor; UserError for a non-floating one."""
    out = []
    for k in range(averaging.num_tensors):
        name = graph.names[averaging.src[k]]
        dtype = dtype_of(name, int(averaging.slot[k]))
        if dtype not in FLOAT_TYPES:
            writer = graph.names[graph.edge_dst[averaging.edges[averaging.edge_tensor == k][0]]]
            raise UserError(f"--replicas: update {writer!r} reads {name}:{averaging.slot[k]}, which depends "
                            f"on the batch but is not floating point (a sparse update's indices?); "
                            f"only dense updates can be averaged across replicas")
        out.append(dtype)
    return out


def _copy(node, prefix, device, means):
    """A copy of `node` in one replica: names, inputs, device and attributes."""
    new = node_def_pb2.NodeDef()
    new.CopyFrom(node)
    new.name = prefix + node.name
    new.device = device
    del new.input[:]
    for text in node.input:
        mean = means.get((node.name, _tensor(text)))
        new.input.append(mean if mean else _prefixed_input(text, prefix))
    if "_class" in node.attr:
        values = [v.replace(b"loc:@", b"loc:@" + prefix.encode(), 1) for v in node.attr["_class"].list.s]
        del new.attr["_class"].list.s[:]
        new.attr["_class"].list.s.extend(values)
    for attr in PREFIXED_ATTRS:
        if attr in node.attr and node.attr[attr].s:
            new.attr[attr].s = prefix.encode() + node.attr[attr].s
    if "seed" in node.attr and "seed2" in node.attr and node.attr["seed"].i == node.attr["seed2"].i == 0:
        new.attr["seed2"].i = zlib.crc32(node.name.encode()) & 0x7FFFFFFF or 1
    return new


def _tensor(text) -> str:
    """"src:slot" for an input string ("src", "src:1"); "^src" for a control input."""
    if text.startswith("^"):
        return text
    name, sep, tail = text.rpartition(":")
    return text if sep and tail.isdigit() else f"{text}:0"


def _prefixed_input(text, prefix) -> str:
    return f"^{prefix}{text[1:]}" if text.startswith("^") else prefix + text


def _mean_nodes(name, inputs, dtype, device) -> list:
    total = _node(f"{name}/sum", "AddN", inputs, device, T=dtype)
    total.attr["N"].i = len(inputs)
    count = _node(f"{name}/count", "Const", [], device)
    count.attr["dtype"].type = dtype
    count.attr["value"].tensor.CopyFrom(tensor_util.make_tensor_proto(len(inputs), dtype))
    return [total, count, _node(name, "RealDiv", [total.name, count.name], device, T=dtype)]


def _joins(names, replicas, dtype_of, device_of) -> list:
    """Top-level train, loss and init over the replicas, for the names the profile
    gives (on replica 0's devices)."""
    out = []
    for key in ("train_op", "init"):
        op = names.get(key, "").split(":")[0]
        if op:
            out.append(_node(op, "NoOp", [f"^replica_{r}/{op}" for r in range(replicas)], device_of(op)))
    loss = names.get("loss", "")
    if loss.endswith(":0"):
        op = loss[:-2]
        out.extend(_mean_nodes(op, [f"replica_{r}/{loss}" for r in range(replicas)], dtype_of(op, 0),
                               device_of(op)))
    return out


def _node(name, op, inputs, device, T=None):
    node = node_def_pb2.NodeDef(name=name, op=op, input=inputs, device=device)
    if T is not None:
        node.attr["T"].type = T
    return node

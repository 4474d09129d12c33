"""Write a placed GraphDef: graph.pb with the full device name of its placement on
every node and nothing else changed, without TensorFlow (pardnn.tf.protos); given an
order (pardnn.graph.order), each of its edges becomes a control input `^before` of
`after`, so TF's executor runs them in that order. A graph with recomputed ops
(pardnn.graph.recompute) gets their copies as NodeDefs, its readers rewired to them
(pardnn.tf.recompute), after checking that each op copied may run twice.

A node pinned to a device kind the cluster lacks (a CPU-only op when placing on
GPUs) goes to the CPU of the host its group was placed on — with its whole
colocation group, so TF never has to split a group.
"""

from __future__ import annotations

import os
import re

import numpy as np

from pardnn.base.errors import UserError
from pardnn.graph.order import control_inputs
from pardnn.tf.graphdef import read_graph_def
from pardnn.tf.recompute import carry_recompute


def placed_devices(graph, placement) -> list:
    """Full TF device name per node of `graph` (see the module docstring)."""
    cluster = placement.cluster
    kinds = {d.kind.upper() for d in cluster.devices}
    to_host = np.zeros(graph.num_groups, bool)
    for i, pin in enumerate(graph.pinned):
        if pin and pin.upper() not in kinds:
            to_host[graph.group[i]] = True
    names = cluster.names
    hosts = [re.sub(r"device:[^/]*$", "device:CPU:0", name) for name in names]
    return [hosts[d] if to_host[g] else names[d]
            for g, d in zip(graph.group.tolist(), placement.device.tolist())]


def write_placed_graph(profile_dir, graph, placement, out_path, order=None) -> None:
    """Write graph.pb of `profile_dir` with every node's device set, the copies of
    the ops `graph` recomputes added, and the control inputs of `order` (an Order of
    `graph`'s ids) added, to `out_path`."""
    source = os.path.join(str(profile_dir), "graph.pb")
    graph_def = read_graph_def(source)
    carry_recompute(profile_dir, graph_def, graph, source)
    devices = placed_devices(graph, placement)
    index = graph.index()
    waits = control_inputs(graph, order)
    for node in graph_def.node:
        i = index.get(node.name)
        if i is None:
            raise UserError(f"{profile_dir}/graph.pb: node {node.name!r} is not in the cost graph "
                            f"(graph.pb changed since it was loaded?)")
        node.device = devices[i]
        node.input.extend(w for w in waits.get(node.name, ()) if w not in node.input)
    with open(out_path, "wb") as f:
        f.write(graph_def.SerializeToString())

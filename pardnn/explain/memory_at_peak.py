"""What fills each device at its emulated peak, by layer, and what the plan could move.

At device d's peak time t (report.json's peak_time_us), pardnn.emulator.memory counts:
resident state of the nodes on d (all step), the buffers live at t (alloc <= t < free:
outputs of ops on d, copies received from other devices) and the scratch of the ops
running at t. Each byte is put in one category:
- `variables`: resident state the loss reads (the model's weights);
- `optimizer_state`: other resident state (optimizer slots, step counters);
- `activations`: buffers of tensors the loss depends on (the forward pass);
- `gradients`: buffers of the other tensors computed from the forward pass's, and of
  what the updates they feed compute with (the backward pass and the optimizer's
  arithmetic: gradients in flight);
- `other_tensors`: buffers of neither (initialisers, learning-rate arithmetic);
- `scratch`: the running ops' temporary memory.
Without a known loss node (a cost graph JSON), resident state is `variables` and every
buffer `activations`. The categories add up to the device's peak_memory_bytes.

A byte is movable when the plan could put its node elsewhere: the node's colocation
group may go to another device (no pin holds it here) and no other member of its group
holds more memory than it (moving it would not drag something bigger along). A received
copy is the consumer's that frees it; a byte is of the layer of the node that made it.
"""

from __future__ import annotations

import numpy as np

from pardnn.graph import NORMAL, REFERENCE, RESIDUAL
from pardnn.graph.constraints import allowed_devices
from pardnn.explain.layers import WRITE_OPS

CATEGORIES = ("variables", "optimizer_state", "activations", "gradients", "other_tensors", "scratch")


def loss_node(graph, profile_json):
    """The node whose output is the loss: profile.json's `loss`, else the first fetch of
    a traced tf.function (its return value); None when unknown or not in the graph."""
    doc = profile_json or {}
    name = doc.get("loss")
    if not name and doc.get("api") == "profile_function" and doc.get("fetches"):
        name = doc["fetches"][0]
    if not isinstance(name, str):
        return None
    index = graph.index()
    return index.get(name.split(":")[0])


def passes(graph, loss):
    """(forward, backward) bool per node: the loss and the nodes it needs the data of;
    the other nodes that take data from those, directly or not (TF's gradient seed is
    often a constant, so the backward pass need not descend from the loss itself), and
    what the variable writes among them take data from (an optimizer's slot arithmetic).
    Control edges do not count: a tf.function's outputs wait for all its updates."""
    n = graph.num_nodes
    if loss is None:
        return np.ones(n, bool), np.zeros(n, bool)
    data = graph.edge_slot >= 0
    into = data[graph.pred_eid]
    pred_ptr, pred_src = _ptr(graph.pred_ptr, into), graph.pred_src[into].tolist()
    forward = _reach(n, pred_ptr, pred_src, [loss])
    after = _reach(n, _ptr(graph.succ_ptr, data), graph.edge_dst[data].tolist(), np.flatnonzero(forward).tolist())
    writes = [v for v in np.flatnonzero(after).tolist() if graph.ops[v].startswith(WRITE_OPS)]
    return forward, (after | _reach(n, pred_ptr, pred_src, writes)) & ~forward


def _ptr(ptr, keep) -> list:
    """The CSR row pointers `ptr` after dropping the entries where `keep` is False."""
    kept = np.concatenate([[0], np.cumsum(keep)])
    return kept[ptr].tolist()


def _reach(n, ptr, adjacent, nodes):
    """Nodes reachable from `nodes` (and they) through `adjacent` (a CSR as lists)."""
    seen = bytearray(n)
    for node in nodes:
        seen[node] = 1
    stack = list(nodes)
    while stack:
        u = stack.pop()
        for v in adjacent[ptr[u]:ptr[u + 1]]:
            if not seen[v]:
                seen[v] = 1
                stack.append(v)
    return np.frombuffer(bytes(seen), np.uint8).astype(bool)


def at_peaks(placed, layers, forward, backward) -> list:
    """Per device, its peak's bytes by category, movable bytes by category, and the
    same for each layer holding some, most first (module docstring)."""
    graph, memory, cluster = placed.graph, placed.memory, placed.cluster
    footprint = node_footprint(graph)
    movable_node = _movable_nodes(graph, cluster, placed.device, footprint)
    rows = []
    for d in range(cluster.num_devices):
        t = float(memory.peak_time_us[d])
        nodes, category, nbytes, holder = _items(placed, d, t, forward, backward)
        by_layer = np.zeros((len(layers.names), len(CATEGORIES) + 1))
        np.add.at(by_layer, (layers.of[nodes], category), nbytes)
        movable = np.where(holder >= 0, movable_node[np.maximum(holder, 0)], False)
        np.add.at(by_layer[:, -1], layers.of[nodes][movable], nbytes[movable])
        totals = np.bincount(category, nbytes, len(CATEGORIES))
        moving = np.bincount(category[movable], nbytes[movable], len(CATEGORIES))
        held = by_layer[:, :-1].sum(axis=1)
        order = [i for i in np.argsort(-held, kind="stable").tolist() if held[i] > 0]
        rows.append({
            "device": cluster.names[d], "peak_bytes": int(memory.peak_bytes[d]), "peak_time_us": t,
            "capacity_bytes": int(cluster.capacity[d]),
            "categories": {c: int(totals[i]) for i, c in enumerate(CATEGORIES)},
            "movable": {c: int(moving[i]) for i, c in enumerate(CATEGORIES)},
            "layers": [{"layer": layers.names[i], **{c: int(by_layer[i, j]) for j, c in enumerate(CATEGORIES)},
                        "total": int(held[i]), "movable": int(by_layer[i, -1])} for i in order]})
    return rows


def node_footprint(graph) -> np.ndarray:
    """Bytes a node holds on its device at most: resident state, own output, scratch."""
    resident = np.where(graph.kind == RESIDUAL, graph.out_bytes, 0) + np.where(
        graph.kind == REFERENCE, 0, graph.persist_bytes)
    return resident + np.where(graph.kind == NORMAL, graph.out_bytes, 0) + graph.temp_bytes


def _movable_nodes(graph, cluster, device, footprint) -> np.ndarray:
    """Per node: its group may go elsewhere and holds no member bigger than it."""
    allowed = allowed_devices(graph, cluster)
    here = device[graph.group_nodes[graph.group_ptr[:-1]]]          # each group's device
    elsewhere = allowed.sum(axis=1) > allowed[np.arange(graph.num_groups), here]
    biggest = np.zeros(graph.num_groups, footprint.dtype)
    np.maximum.at(biggest, graph.group, footprint)
    return elsewhere[graph.group] & (footprint >= biggest[graph.group])


def _items(placed, d, t, forward, backward):
    """What device d holds at time t, as parallel arrays: the node each item is of
    (for its layer), its category index, its bytes, and the node that holds it here
    (for movability: the consumer for a received copy, -1 when none)."""
    graph, memory, schedule, device = placed.graph, placed.memory, placed.schedule, placed.device
    on = np.flatnonzero(device == d)
    resident = (np.where(graph.kind[on] == RESIDUAL, graph.out_bytes[on], 0)
                + np.where(graph.kind[on] == REFERENCE, 0, graph.persist_bytes[on]))
    keep = resident > 0
    res_nodes = on[keep]
    res_cat = np.where(forward[res_nodes], 0, 1)
    live = np.flatnonzero((memory.buf_device == d) & (memory.buf_alloc <= t) & (t < memory.buf_free))
    buf_nodes = memory.buf_node[live]
    own = device[buf_nodes] == d
    buf_cat = np.where(forward[buf_nodes], 2, np.where(backward[buf_nodes], 3, 4))
    buf_holder = np.where(own, buf_nodes, memory.buf_owner[live])
    running = on[(schedule.start[on] <= t) & (t < schedule.finish[on]) & (graph.temp_bytes[on] > 0)]
    return (np.concatenate([res_nodes, buf_nodes, running]),
            np.concatenate([res_cat, buf_cat, np.full(len(running), 5)]).astype(np.int64),
            np.concatenate([resident[keep], memory.buf_bytes[live], graph.temp_bytes[running]]).astype(np.int64),
            np.concatenate([res_nodes, buf_holder, running]).astype(np.int64))

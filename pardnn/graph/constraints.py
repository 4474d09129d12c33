"""The rules every placer obeys: colocation groups stay whole, pinned nodes stay on
their device kind.

A group's allowed devices are those whose kind matches every pin in the group. A pin
to a kind the cluster lacks (e.g. a CPU-only op when placing on GPUs) does not
restrict the planner; `pardnn.tf.rewrite` sends such nodes to the host CPU, where
TensorFlow would put them anyway (docs/profiles.md, "Loading one": "Pinned"). An op
with no CPU kernel is pinned to "GPU" the same way, so on a cluster with the host as a
device (`dgx-h100+host`) it never goes to the host.
"""

import numpy as np


def allowed_devices(graph, cluster) -> np.ndarray:
    """Bool matrix (groups x devices): where each colocation group may go."""
    kinds = np.array([d.kind.upper() for d in cluster.devices])
    allowed = np.ones((graph.num_groups, cluster.num_devices), bool)
    for node, pin in enumerate(graph.pinned):
        if pin and np.any(kinds == pin.upper()):
            allowed[graph.group[node]] &= kinds == pin.upper()
    empty = ~allowed.any(axis=1)
    if np.any(empty):
        g = int(np.flatnonzero(empty)[0])
        members = graph.group_members(g)
        pins = sorted({graph.pinned[i].upper() for i in members if graph.pinned[i]})
        from pardnn.base.errors import UserError
        raise UserError(f"PROFILE: colocation group of {[graph.names[i] for i in members[:3]]} is pinned "
                        f"to {' and '.join(pins)} at once; no device can run it")
    return allowed


def violations(graph, cluster, device) -> list:
    """Human-readable list of broken rules (empty for a valid placement)."""
    device = np.asarray(device)
    problems = []
    if device.shape != (graph.num_nodes,):
        return [f"placement has {device.shape} entries for {graph.num_nodes} nodes"]
    if device.min(initial=0) < 0 or device.max(initial=0) >= cluster.num_devices:
        problems.append("device index outside the cluster")
        return problems
    first = device[graph.group_nodes[graph.group_ptr[:-1]]] if graph.num_nodes else device
    split = np.flatnonzero(device != first[graph.group])
    if len(split):
        problems.append(f"colocation group split at node {graph.names[split[0]]!r}")
    allowed = allowed_devices(graph, cluster)
    bad = np.flatnonzero(~allowed[graph.group, device])
    if len(bad):
        problems.append(f"pinned node {graph.names[bad[0]]!r} on a device of the wrong kind")
    return problems



def onto_allowed(graph, cluster, device) -> np.ndarray:
    """`device` (int per node) with each colocation group that sits on a device its pins
    rule out moved to the first device they allow (int32): for a placement made on part
    of the cluster (pardnn.placers.registry: the fastest devices), where a pin to a kind
    that part lacks did not restrict the placer."""
    device = np.asarray(device, np.int32).copy()
    allowed = allowed_devices(graph, cluster)
    first = device[graph.group_nodes[graph.group_ptr[:-1]]] if graph.num_nodes else np.zeros(0, np.int32)
    wrong = np.flatnonzero(~allowed[np.arange(graph.num_groups), first])
    if len(wrong):
        target = np.argmax(allowed[wrong], axis=1).astype(np.int32)
        moved = np.zeros(graph.num_groups, np.int32) - 1
        moved[wrong] = target
        change = moved[graph.group] >= 0
        device[change] = moved[graph.group][change]
    return device

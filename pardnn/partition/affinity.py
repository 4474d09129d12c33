"""Affinity placement: a second candidate for refinement, built around the
colocation groups that feed heavy tensors (not in the thesis).

Why: in an RNN every time step of a layer reads the layer's weights (one
ReadVariableOp per step, all in the variable's colocation group) and sends back a
weight gradient of the same size. Slicing follows the critical path, which crosses
the layers diagonally, so the time steps of a layer end up in different clusters
from the weights and LALB spreads them over devices: every step then fetches the
weights and returns the gradient (11.5 GB per step for word-rnn-big at K = 8).
Putting each such group together with the ops tied to it by heavy edges gives a
layer-per-device pipeline instead, which the emulator finds 1.5-2x faster on the
RNN benchmarks (docs/algorithm.md, "Quality").

1. Heavy edge: one whose time on the wire (bytes / mean bandwidth) exceeds both the
   mean link latency and its consumer's compute: bandwidth-bound transfers, which
   are what queue on a link, and dearer than the work they feed.
2. Anchors: colocation groups of two or more nodes with at least MIN_HEAVY heavy
   edges; each is a label (in group id order).
3. Labels spread by breadth-first search, first over heavy edges only, then over
   all edges (both directions); a node takes the label that reaches it first, ties
   to the lowest label. Nodes reached by none take label 0. A group takes the
   label of its first member.
4. Labels go to devices heaviest first, each to the device with least work so far
   (ties to the lowest index).

Refinement emulates this candidate and keeps it only when it is faster, so it can
never make Step 1 worse. It is skipped when some group may not use every device
(the labels ignore device kinds) and when there are fewer than two anchors.
"""

import numpy as np

MIN_HEAVY = 2


def affinity_devices(graph, cluster, allowed):
    """int32 device per node, or None when the candidate does not apply."""
    k = cluster.num_devices
    if k < 2 or not allowed.all():
        return None
    latency, bandwidth = cluster.mean_link()
    moving = graph.edge_bytes / bandwidth
    heavy = (moving > latency) & (moving > graph.comp_us[graph.edge_dst])
    anchors = _anchor_groups(graph, heavy)
    if len(anchors) < 2:
        return None
    label = np.full(graph.num_nodes, -1, np.int64)
    members = np.concatenate([graph.group_members(g) for g in anchors])
    label[members] = np.repeat(np.arange(len(anchors)), np.diff(graph.group_ptr)[anchors])
    label = _spread(graph, label, heavy)
    label = _spread(graph, label, np.ones(graph.num_edges, bool))
    label[label < 0] = 0
    label = label[graph.group_nodes[graph.group_ptr[:-1]]][graph.group]
    return _devices_of_labels(graph, label, len(anchors), k)[label].astype(np.int32)


def _anchor_groups(graph, heavy) -> np.ndarray:
    """Group ids of groups with two or more members and >= MIN_HEAVY heavy edges."""
    ends = np.concatenate([graph.edge_src[heavy], graph.edge_dst[heavy]])
    count = np.bincount(graph.group[ends], minlength=graph.num_groups)
    return np.flatnonzero((count >= MIN_HEAVY) & (np.diff(graph.group_ptr) >= 2))


def _spread(graph, label, use) -> np.ndarray:
    """Breadth-first label spreading over the edges where `use` holds, both ways."""
    a = np.concatenate([graph.edge_src[use], graph.edge_dst[use]])
    b = np.concatenate([graph.edge_dst[use], graph.edge_src[use]])
    order = np.argsort(a, kind="stable")
    a, b = a[order], b[order]
    ptr = np.searchsorted(a, np.arange(graph.num_nodes + 1))
    label = label.copy()
    frontier = np.flatnonzero(label >= 0)
    while len(frontier):
        count = ptr[frontier + 1] - ptr[frontier]
        pos = np.repeat(ptr[frontier] - np.cumsum(count) + count, count) + np.arange(count.sum())
        nxt, lab = b[pos], np.repeat(label[frontier], count)
        new = label[nxt] < 0
        nxt, lab = nxt[new], lab[new]
        order = np.lexsort((lab, nxt))
        nxt, lab = nxt[order], lab[order]
        first = np.flatnonzero(np.r_[True, nxt[1:] != nxt[:-1]]) if len(nxt) else nxt
        label[nxt[first]] = lab[first]
        frontier = nxt[first]
    return label


def _devices_of_labels(graph, label, num_labels, k) -> np.ndarray:
    """Device per label: heaviest label first, onto the least loaded device."""
    work = np.bincount(label, graph.comp_us, minlength=num_labels)
    load = np.zeros(k)
    device = np.zeros(num_labels, np.int64)
    for lab in np.argsort(-work, kind="stable").tolist():
        d = int(np.argmin(load))
        device[lab] = d
        load[d] += work[lab]
    return device

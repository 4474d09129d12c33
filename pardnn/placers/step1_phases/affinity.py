"""Affinity placement: a second candidate for refinement, built around the
colocation groups that feed heavy tensors (not in the thesis).

Why: in an RNN every time step of a layer reads the layer's weights (one
ReadVariableOp per step, all in the variable's colocation group) and sends back a
weight gradient of the same size. Slicing follows the critical path, which crosses
the layers diagonally, so the time steps of a layer end up in different clusters
from the weights and LALB spreads them over devices: every step then fetches the
weights and returns the gradient. Putting each such group together with the ops
tied to it by heavy edges gives a layer-per-device pipeline instead (measured in
docs/algorithm.md, "Measured").

1. Heavy edge: one whose time on the wire (bytes / mean bandwidth) exceeds both the
   mean link latency and its consumer's compute: bandwidth-bound transfers, which
   are what queue on a link, and dearer than the work they feed.
2. Anchors: colocation groups of two or more nodes with at least MIN_HEAVY heavy
   edges; each is a label (in group id order).
3. Labels spread by breadth-first search, first over heavy edges only, then over
   all edges (both directions); a node takes the label that reaches it first, ties
   to the lowest label. Nodes reached by none take label 0. A group takes the
   label of its first member.
4. Labels go to devices in two ways, one candidate each:
   - balance: heaviest first, each to the device with least work so far (ties to
     the lowest index);
   - pipeline: in order of their earliest start, each to the device whose queue
     it delays least (`_devices_in_time_order`). Balance alone can put two RNN
     layers on one device, which then runs both forward passes in turn, and can
     leave a layer's gradient accumulation where it stalls another layer's
     backward wave. Neither wins everywhere, hence both.

Refinement emulates the candidates and keeps the fastest only when it beats the
mapping, so they can never make Step 1 worse. It is skipped when some group may not use every device
(the labels ignore device kinds) and when there are fewer than two anchors.
"""

import numpy as np

from pardnn.base.compiled import INTERPRETED_BELOW, kernel
from pardnn.graph.levels import top_levels

MIN_HEAVY = 2
WINDOWS = 32    # time windows of the pipeline candidate's queue model (a multiple of 8, <= 128)


def affinity_candidates(graph, cluster, allowed) -> list:
    """int32 device per node for each candidate (balance, then pipeline); [] when
    the affinity placement does not apply."""
    label = affinity_labels(graph, cluster, allowed)
    if label is None:
        return []
    num_labels, k = int(label.max()) + 1, cluster.num_devices
    return [assign[label].astype(np.int32) for assign in
            (_devices_of_labels(graph, label, num_labels, k),
             _devices_in_time_order(graph, cluster, label, num_labels))]


def affinity_labels(graph, cluster, allowed):
    """Label per node (steps 1-3; a group's nodes share one), or None when the
    placement does not apply."""
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
    return label[graph.group_nodes[graph.group_ptr[:-1]]][graph.group]


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


def _devices_in_time_order(graph, cluster, label, num_labels) -> np.ndarray:
    """Device per label for the pipeline candidate.

    Each label's work is binned into WINDOWS equal time windows by its nodes'
    earliest start (top levels, with the mean link cost on edges between labels,
    as if every label had a device of its own). Labels are taken in order of their
    first start; each goes to the device whose queue, with the label's work added,
    ends with the least backlog, a device serving one window's length of work per
    window (ties: least work, then the lowest index). The backlog is the Lindley
    recursion's last value, computed for all devices at once from prefix sums."""
    k = cluster.num_devices
    latency, bandwidth = cluster.mean_link()
    cut = label[graph.edge_src] != label[graph.edge_dst]
    start = top_levels(graph, graph.comp_us, np.where(cut, latency + graph.edge_bytes / bandwidth, 0.0))
    span = float((start + graph.comp_us).max(initial=0.0))
    window = np.minimum((start * (WINDOWS / span if span > 0 else 0.0)).astype(np.int64), WINDOWS - 1)
    work = np.zeros((num_labels, WINDOWS))
    np.add.at(work, (label, window), graph.comp_us)
    first = np.full(num_labels, np.inf)
    np.minimum.at(first, label, start)
    order = np.lexsort((np.arange(num_labels), first))
    if graph.num_nodes >= INTERPRETED_BELOW:
        return _queued.compiled(order, work, k, span / WINDOWS)
    return _queued_by_numpy(order, work, k, span / WINDOWS)


def _queued_by_numpy(order, work, k, per_window) -> np.ndarray:
    """Device per label, labels taken in `order`, each where its queue ends with the least
    backlog (see `_devices_in_time_order`); `per_window`, the work a device serves in one
    window. The definition `_queued` is tested against."""
    load, device = np.zeros((k, WINDOWS)), np.zeros(len(work), np.int64)
    for lab in order.tolist():
        excess = np.cumsum(load + (work[lab] - per_window), axis=1)
        backlog = excess[:, -1] - np.minimum(excess.min(axis=1), 0.0)
        d = int(np.lexsort((np.arange(k), load.sum(axis=1), backlog))[0])
        device[lab] = d
        load[d] += work[lab]
    return device


@kernel
def _queued(order, work, k, per_window):
    """`_queued_by_numpy` in one compiled loop, with the same float operations in the same
    order: the cumulative excess is summed left to right as np.cumsum does, and each
    device's load as numpy sums a row of WINDOWS (a multiple of 8, at most 128) terms:
    eight accumulators, accumulator j taking terms j, j + 8, ..., added in pairs."""
    windows = work.shape[1]
    load, device = np.zeros((k, windows)), np.zeros(work.shape[0], np.int64)
    held, acc = np.zeros(k), np.zeros(8)
    for lab in order:
        best, best_backlog, best_held = -1, 0.0, 0.0
        for d in range(k):
            excess = load[d, 0] + (work[lab, 0] - per_window)
            low = excess
            for w in range(1, windows):
                excess = excess + (load[d, w] + (work[lab, w] - per_window))
                low = min(low, excess)
            backlog = excess - min(low, 0.0)
            if best < 0 or backlog < best_backlog or (backlog == best_backlog and held[d] < best_held):
                best, best_backlog, best_held = d, backlog, held[d]
        device[lab] = best
        for w in range(windows):
            load[best, w] += work[lab, w]
        for j in range(8):
            acc[j] = load[best, j]
        for w in range(8, windows, 8):
            for j in range(8):
                acc[j] += load[best, w + j]
        held[best] = 0.0 + (((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7])))
    return device

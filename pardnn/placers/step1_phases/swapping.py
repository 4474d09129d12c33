"""Cluster swapping, the first step of refinement (thesis §4.1.1, "Refinement";
pardnn.placers.step1_phases.refinement runs it and emulates the result).

A secondary sc whose span is less loaded on device b swaps with a lighter secondary
on b that starts within span(sc) when the sum of their Eq. 4.2 costs drops (the
thesis gives no formula): a cluster's cost on a device is the device's work within
its span (less its own) plus its cut edges' communication there. Only secondaries
LALB mapped swap; each at most once; at most SCAN partners scanned in start order,
O(C log C).

The loop is a kernel (pardnn.base.compiled) over the mapping's arrays: the Fenwick tree
of work per level (pardnn.placers.step1_phases.fenwick, updated in place), the clusters'
members and the graph's edges both ways. It rounds as the numpy code of mapping
does: a range of the tree sums its rows in order, and a communication cost sums its
terms in numpy's pairwise order (`numpy_sum_plan`).
"""

from typing import NamedTuple

import numpy as np

from pardnn.base.compiled import kernel
from pardnn.placers.step1_phases.cut_edges import ADD, ZERO, numpy_sum_plan

SCAN = 32


class Swapping(NamedTuple):
    """What the swap loop reads and writes: int64 and float64 arrays."""

    succ_ptr: np.ndarray
    edge_dst: np.ndarray
    pred_ptr: np.ndarray
    pred_src: np.ndarray
    pred_eid: np.ndarray
    edge_bytes: np.ndarray      # float64 per edge
    cluster: np.ndarray         # per node
    device: np.ndarray          # per node, kept equal to cdev[cluster]
    comp: np.ndarray
    level: np.ndarray           # per node: its start level
    member_ptr: np.ndarray      # per cluster: its nodes in id order, CSR
    members: np.ndarray
    cdev: np.ndarray            # per cluster: its device
    weight: np.ndarray
    span: np.ndarray            # (clusters x 2): [lo, hi) in levels
    allowed: np.ndarray         # bool (clusters x devices)
    tree: np.ndarray            # the Fenwick tree's (levels + 1) x devices array
    link_cost: np.ndarray       # (devices x 4 devices): ClusterLinks.cost
    sum_plan: np.ndarray        # numpy_sum_plan(4 devices)


def swap_clusters(graph, slices, mapping) -> int:
    """Swap pairs of secondary clusters within spans (updates mapping.links and
    mapping.work in place); returns the number of swaps."""
    lalb = np.setdiff1d(np.arange(slices.num_primary, slices.num_clusters), mapping.merged)
    if len(lalb) < 2:
        return 0
    head_level = mapping.level[slices.head[lalb]]
    by_start = lalb[np.argsort(head_level, kind="stable")]
    starts = np.sort(head_level)
    clusters, targets = _unbalanced(mapping, lalb)
    span = mapping.span[clusters]
    state = _arrays(graph, slices, mapping)
    pairs = _swap_loop.for_size(graph.num_nodes)(state, clusters, targets, np.searchsorted(starts, span[:, 0]),
                                                 np.searchsorted(starts, span[:, 1]), by_start)
    for c in pairs.reshape(-1).tolist():
        mapping.links.assign(c, int(state.cdev[c]))
    return len(pairs)


def _unbalanced(mapping, clusters) -> tuple:
    """(clusters, devices), heaviest cluster first, where the allowed device with
    least work in the cluster's span would still have less with the cluster added
    (a snapshot of the loads after mapping)."""
    cum = _level_prefix.for_size(len(mapping.level))(mapping.work.tree)
    lo, hi = mapping.span[clusters].T
    loads = np.where(mapping.allowed[clusters], cum[hi] - cum[lo], np.inf)
    here = loads[np.arange(len(clusters)), mapping.links.cdev[clusters]]
    target = np.argmin(loads, axis=1)
    pick = np.flatnonzero(loads[np.arange(len(clusters)), target] + mapping.weight[clusters] < here)
    pick = pick[np.argsort(-mapping.weight[clusters[pick]], kind="stable")]
    return clusters[pick].astype(np.int64), target[pick].astype(np.int64)


@kernel
def _level_prefix(tree):
    """Row j: the work of levels 0..j-1 on each device, from the Fenwick tree's array:
    FenwickTree.values() (the build undone one bit at a time from the top), then
    np.cumsum over the levels below a row of zeros, in the same order."""
    size, k = tree.shape[0] - 1, tree.shape[1]
    values = tree.copy()
    step = 1
    while 2 * step <= size:
        step *= 2
    while step >= 1:
        for child in range(step, size + 1 - step, 2 * step):
            for d in range(k):
                values[child + step, d] -= values[child, d]
        step //= 2
    cum = np.zeros((size + 1, k))
    if size > 0:
        cum[1] = values[1]
    for j in range(2, size + 1):
        for d in range(k):
            cum[j, d] = cum[j - 1, d] + values[j, d]
    return cum


def _arrays(graph, slices, mapping) -> Swapping:
    """The swap loop's arrays; its tree is mapping.work's own, the rest copies."""
    i64, cid = np.int64, np.asarray(slices.cluster, np.int64)
    order = np.argsort(cid, kind="stable")
    member_ptr = np.searchsorted(cid[order], np.arange(slices.num_clusters + 1))
    cdev = np.array(mapping.links.cdev, i64)
    cost = np.asarray(mapping.links.arrays.cost, np.float64)
    return Swapping(*graph.successor_arrays, *(np.asarray(a, i64) for a in (graph.pred_ptr, graph.pred_src,
                                                                            graph.pred_eid)),
                    np.asarray(graph.edge_bytes, np.float64), cid, cdev[cid], np.asarray(graph.comp_us, np.float64),
                    np.asarray(mapping.level, i64), member_ptr.astype(i64), order.astype(i64), cdev,
                    np.asarray(mapping.weight, np.float64), np.asarray(mapping.span, i64),
                    np.asarray(mapping.allowed, np.bool_), mapping.work.tree, cost,
                    numpy_sum_plan(cost.shape[1]))


@kernel
def _swap_loop(s, clusters, targets, first, last, by_start):
    """Tries to swap each of `clusters` (heaviest first) with the partner on targets[i]
    of largest gain (ties: lowest id) among the secondaries by_start[first[i]:last[i]]
    (at most SCAN of them); returns the swapped pairs, (swaps x 2)."""
    k, size = s.tree.shape[1], s.tree.shape[0] - 1
    swapped = np.zeros(s.cdev.shape[0], np.bool_)
    pairs = np.empty((clusters.shape[0], 2), np.int64)
    up, down = np.empty(64, np.int64), np.empty(64, np.int64)
    counts, stack = np.zeros(4 * k), np.empty(s.sum_plan.shape[0])

    def chain(end, out):
        """Tree rows whose sum is the prefix of length `end`, highest bit last."""
        n = 0
        while end > 0:
            out[n] = end
            end &= end - 1
            n += 1
        return n

    def load(lo, hi, d):
        """FenwickTree.range_sum(lo, hi)[d]: shared high bits cancel, rows summed in order
        (as numpy sums them with 2 devices or more; one device has nothing to swap)."""
        if hi <= lo:
            return 0.0
        nu, nd = chain(hi, up), chain(lo, down)
        while nu > 0 and nd > 0 and up[nu - 1] == down[nd - 1]:
            nu -= 1
            nd -= 1
        total, less = 0.0, 0.0
        for i in range(nu):
            total += s.tree[up[i], d]
        for i in range(nd):
            less += s.tree[down[i], d]
        return total - less

    def work_in(x, lo, hi):
        """The work of x's nodes that start within [lo, hi)."""
        total = 0.0
        for i in range(s.member_ptr[x], s.member_ptr[x + 1]):
            n = s.members[i]
            if lo <= s.level[n] < hi:
                total += s.comp[n]
        return total

    def count_links(x):
        """counts: x's cut edges out and in, and their bytes, per device of the other
        end (ClusterLinks.counts); returns False when x has none."""
        counts[:] = 0.0
        linked = False
        for i in range(s.member_ptr[x], s.member_ptr[x + 1]):
            n = s.members[i]
            for e in range(s.succ_ptr[n], s.succ_ptr[n + 1]):
                v = s.edge_dst[e]
                if s.cluster[v] != x:
                    counts[s.device[v]] += 1.0
                    counts[k + s.device[v]] += s.edge_bytes[e]
                    linked = True
            for p in range(s.pred_ptr[n], s.pred_ptr[n + 1]):
                u = s.pred_src[p]
                if s.cluster[u] != x:
                    counts[2 * k + s.device[u]] += 1.0
                    counts[3 * k + s.device[u]] += s.edge_bytes[s.pred_eid[p]]
                    linked = True
        return linked

    def comm(linked, d):
        """ClusterLinks.comm_cost(x)[d] from count_links(x): link_cost[d] @ counts, summed
        as numpy sums the row (sum_plan)."""
        if not linked:
            return 0.0
        top = 0
        for op in s.sum_plan:
            if op == ADD:
                top -= 1
                stack[top - 1] += stack[top]
            else:
                stack[top] = 0.0 if op == ZERO else s.link_cost[d, op] * counts[op]
                top += 1
        return stack[0]

    def move(x, old, new):
        """x's work leaves `old` and joins `new` in the tree (FenwickTree.add), then x moves."""
        for sign, d in ((-1.0, old), (1.0, new)):
            for i in range(s.member_ptr[x], s.member_ptr[x + 1]):
                n = s.members[i]
                pos = s.level[n] + 1
                while pos <= size:
                    s.tree[pos, d] += sign * s.comp[n]
                    pos += pos & -pos
        s.cdev[x] = new
        for i in range(s.member_ptr[x], s.member_ptr[x + 1]):
            s.device[s.members[i]] = new

    def best_partner(i):
        """(gain, partner) of clusters[i]'s best swap; partner -1 when none qualifies."""
        c, b = clusters[i], targets[i]
        a, lo, hi = s.cdev[c], s.span[c, 0], s.span[c, 1]
        best, partner = 0.0, -1
        load_a, load_b, own, comm_a, comm_b = 0.0, 0.0, 0.0, 0.0, 0.0
        for j in range(first[i], min(last[i], first[i] + SCAN)):
            c2 = by_start[j]
            if s.cdev[c2] != b or swapped[c2] or not s.weight[c2] < s.weight[c] or not s.allowed[c2, a]:
                continue
            if partner < 0:                     # c's own side, once it has a partner
                linked = count_links(c)
                load_a, load_b, own = load(lo, hi, a), load(lo, hi, b), work_in(c, lo, hi)
                comm_a, comm_b = comm(linked, a), comm(linked, b)
            lo2, hi2 = s.span[c2, 0], s.span[c2, 1]
            linked = count_links(c2)
            before = load_a - own + comm_a + load(lo2, hi2, b) - work_in(c2, lo2, hi2) + comm(linked, b)
            after = (load_b - work_in(c2, lo, hi) + comm_b
                     + load(lo2, hi2, a) - work_in(c, lo2, hi2) + comm(linked, a))
            gain = before - after
            if partner < 0 or gain > best or (gain == best and c2 < partner):
                best, partner = gain, c2
        return best, partner

    swaps = 0
    for i in range(clusters.shape[0]):
        c = clusters[i]
        if swapped[c]:
            continue
        gain, partner = best_partner(i)
        if partner >= 0 and gain > 0.0:
            a, b = s.cdev[c], s.cdev[partner]
            move(c, a, b)
            move(partner, b, a)
            swapped[c] = swapped[partner] = True
            pairs[swaps, 0], pairs[swaps, 1] = c, partner
            swaps += 1
    return pairs[:swaps].copy()

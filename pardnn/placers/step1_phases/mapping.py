"""Mapping: secondary clusters join the primaries (thesis §4.1.1, "Mapping",
Algorithm 2, Eq. 4.2).

Primary cluster j runs on device j. Times come from the top levels of the sliced
graph, where an edge inside a cluster is free and a cut edge costs the mean link:
tl(n) is n's expected start time, tl(n) + comp(n) its finish, and the distinct
start times are the "levels" of the Fenwick trees.

span(sc) runs from the latest finish among the parents of sc's first node to the
earliest start among the children of its last node (Table 4.2). The work within a
span is that of the nodes whose start level lies in it.

1. Initial merging (Algorithm 2, lines 1-7): a secondary cluster whose
   communication (the mean-link cost of its cut edges) exceeds its potential (the
   work of the other nodes within its span) gains nothing from running apart; in
   slicing order, it joins the device it communicates with most. One whose
   neighbours are all still unmapped is left to LALB.
2. LALB (lines 9-15), heaviest cluster first: the cluster goes to the allowed device
   that minimises Eq. 4.2, the device's work within the span (Fenwick range sum)
   plus the cost, on the real links of that device, of the cluster's edges to nodes
   already mapped elsewhere. Ties go to the device it communicates with most, then
   to the lowest index. Edges to clusters not mapped yet are not counted: their
   cost is unknown (the thesis counts edges to primaries only). Each edge counts
   once even when two consumers on one device share a tensor, a small
   overestimate that keeps the count to one pass over the edges.

Both loops are one kernel (pardnn.base.compiled), `_map_in_order`, over the arrays of
ClusterLinks and the Fenwick tree's; it sums in the order the numpy code of
ClusterLinks.comm_cost and FenwickTree.range_sum does, so both give the same bits.
"""

from dataclasses import dataclass

import numpy as np

from pardnn.base.compiled import kernel
from pardnn.graph.levels import top_levels
from pardnn.placers.step1_phases.fenwick import FenwickTree
from pardnn.placers.step1_phases.cut_edges import ADD, ZERO, ClusterLinks


@dataclass
class Mapping:
    """The mapping's result and what refinement needs from it."""

    device: np.ndarray          # per node
    links: ClusterLinks         # cluster members, devices and cut edges
    allowed: np.ndarray         # (clusters x devices)
    weight: np.ndarray          # per cluster: its work
    level: np.ndarray           # per node: index of its start time among the levels
    span: np.ndarray            # per cluster: [lo, hi) in levels
    work: FenwickTree           # per device work per level
    merged: np.ndarray          # cluster ids placed by initial merging


def map_clusters(graph, cluster, slices, edge_cost, allowed) -> Mapping:
    """Place every cluster of `slices` on a device; `allowed` is the (groups x
    devices) matrix of pardnn.graph.constraints.allowed_devices."""
    cid, first = slices.cluster, slices.num_primary
    ok = _cluster_allowed(slices, graph.group, allowed)
    cdev = np.full(slices.num_clusters, -1, np.int64)
    cdev[:first] = _primary_devices(ok[:first])
    level, span, potential, comm = _timeline(graph, slices, edge_cost)
    links = ClusterLinks(graph, cluster, slices, cdev)
    comp = np.asarray(graph.comp_us, np.float64)
    run = _map_in_order.for_size(graph.num_nodes)
    merge = np.flatnonzero(comm[first:] > potential[first:]) + first
    merged = merge[run(merge, False, links.arrays, links.dev, cdev, ok, np.zeros((1, cluster.num_devices)),
                       span, level, comp)]
    values = np.zeros((cluster.num_devices, int(level.max(initial=0)) + 1))
    done = cdev[cid] >= 0
    np.add.at(values, (cdev[cid][done], level[done]), graph.comp_us[done])
    work = FenwickTree(values)
    weight = np.bincount(cid, graph.comp_us, minlength=slices.num_clusters)
    rest = np.flatnonzero(cdev < 0)
    run(rest[np.argsort(-weight[rest], kind="stable")], True, links.arrays, links.dev, cdev, ok,
        work.tree, span, level, comp)
    return Mapping(cdev[cid].astype(np.int32), links, ok, weight, level, span, work, merged)


@kernel
def _map_in_order(clusters, lalb, links, dev, cdev, ok, tree, span, level, comp):
    """Maps `clusters` in this order (updating dev, cdev, and with lalb the Fenwick
    `tree`); returns whether each was mapped. lalb: the allowed device least by Eq.
    4.2 (ties: the one it communicates with most, then the lowest); else initial
    merging: the allowed device it communicates with most, if any."""
    k = ok.shape[1]
    counts, terms, partial = np.zeros(4 * k), np.zeros(4 * k), np.zeros(len(links.plan))
    cost, talk = np.zeros(k), np.zeros(k)
    up, down = np.zeros(64, np.int64), np.zeros(64, np.int64)
    mapped = np.zeros(len(clusters), np.bool_)

    def count(c):
        """counts as ClusterLinks.counts(c) fills them; False when no neighbour is mapped."""
        counts[:] = 0.0
        seen = False
        for i in range(links.ptr[c], links.ptr[c + 1]):
            d = dev[links.other[i]]
            if d >= 0:
                seen = True
                j = links.slot[i] + d
                counts[j] += 1.0
                counts[j + k] += links.nbytes[i]
        return seen

    def talk_with():
        """talk[d]: mean-link cost of the cut edges to nodes mapped on d."""
        for d in range(k):
            talk[d] = (links.with_cost[0] * (counts[d] + counts[2 * k + d])
                       + links.with_cost[1] * (counts[k + d] + counts[3 * k + d]))

    def row_sum():
        """terms.sum() as numpy adds it: links.plan (cut_edges.numpy_sum_plan) run."""
        top = 0
        for op in links.plan:
            if op == ADD:
                top -= 1
                partial[top - 1] += partial[top]
            else:
                partial[top] = 0.0 if op == ZERO else terms[op]
                top += 1
        return partial[0]

    def chain(end, out):
        """FenwickTree's prefix positions of `end` into out, highest bit last; how many."""
        n = 0
        while end > 0:
            out[n] = end
            n += 1
            end &= end - 1
        return n

    def span_work(c):
        """cost[d] = FenwickTree.range_sum over c's span, summed in the same order."""
        lo, hi = span[c, 0], span[c, 1]
        nu, nd = chain(hi, up), chain(lo, down)
        while nu > 0 and nd > 0 and up[nu - 1] == down[nd - 1]:
            nu -= 1
            nd -= 1
        for d in range(k):
            a, b = 0.0, 0.0
            if hi > lo:
                for i in range(nu):
                    a += tree[up[i], d]
                for i in range(nd):
                    b += tree[down[i], d]
            cost[d] = a - b

    def eq_4_2(c, seen):
        """The allowed device least in work plus communication; ties as documented."""
        span_work(c)
        for d in range(k):
            if seen:
                for i in range(4 * k):
                    terms[i] = links.cost[d, i] * counts[i]
                cost[d] = cost[d] + row_sum()
            if not ok[c, d]:
                cost[d] = np.inf
        low = cost.min()
        best, ties = -1, 0
        for d in range(k):
            if cost[d] == low:
                ties += 1
                best = d if best < 0 else best
        if ties > 1 and seen:
            talk_with()
            best = -1
            for d in range(k):
                if cost[d] == low and (best < 0 or talk[d] > talk[best]):
                    best = d
        return best

    def most_talk(c):
        """Initial merging: the allowed device c communicates with most, -1 if none."""
        talk_with()
        best = 0
        for d in range(k):
            if not ok[c, d]:
                talk[d] = -1.0
            if talk[d] > talk[best]:
                best = d
        return best if talk[best] > 0.0 else -1

    for x in range(len(clusters)):
        c = clusters[x]
        seen = count(c)
        d = eq_4_2(c, seen) if lalb else (most_talk(c) if seen else -1)
        if d < 0:
            continue
        mapped[x] = True
        cdev[c] = d
        for m in range(links.member_ptr[c], links.member_ptr[c + 1]):
            n = links.member_nodes[m]
            dev[n] = d
            i = level[n] + 1
            while lalb and i < len(tree):               # FenwickTree.add, node by node
                tree[i, d] += comp[n]
                i += i & -i
    return mapped


def _cluster_allowed(slices, group, allowed) -> np.ndarray:
    """(clusters x devices): devices allowed to every group in the cluster."""
    ok = np.ones((slices.num_clusters, allowed.shape[1]), bool)
    if not allowed.all():
        np.logical_and.at(ok, slices.cluster, allowed[group])
    return ok


def _primary_devices(ok) -> np.ndarray:
    """Primary j gets device j, or the first free device it may use (thesis:
    "the terms primary cluster and pe are used interchangeably")."""
    k = ok.shape[1]
    taken = np.zeros(k, bool)
    out = np.empty(len(ok), np.int64)
    for j, row in enumerate(ok):
        free = np.flatnonzero(row & ~taken)
        if j < k and row[j] and not taken[j]:
            out[j] = j
        else:
            out[j] = free[0] if len(free) else np.flatnonzero(row)[0]
        taken[out[j]] = True
    return out


def _timeline(graph, slices, edge_cost):
    """Per node start level; per cluster span [lo, hi) in levels, potential, comm."""
    cid, src, dst = slices.cluster, graph.edge_src, graph.edge_dst
    cut = cid[src] != cid[dst]
    ec = np.where(cut, edge_cost, 0.0)
    tl = top_levels(graph, graph.comp_us, ec)
    finish = tl + graph.comp_us
    times = np.unique(tl)
    level = np.searchsorted(times, tl)
    c = slices.num_clusters
    lo, hi = np.full(c, -np.inf), np.full(c, np.inf)
    into_head = np.flatnonzero(slices.head[cid[dst]] == dst)
    np.maximum.at(lo, cid[dst[into_head]], finish[src[into_head]])
    from_tail = np.flatnonzero(slices.tail[cid[src]] == src)
    np.minimum.at(hi, cid[src[from_tail]], tl[dst[from_tail]])
    lo = np.where(np.isfinite(lo), lo, tl[slices.head])
    hi = np.where(np.isfinite(hi), hi, finish[slices.tail])
    span = np.stack([np.searchsorted(times, lo), np.searchsorted(times, hi)], axis=1)
    per_level = np.concatenate([[0.0], np.cumsum(np.bincount(level, graph.comp_us, len(times)))])
    inside = (level >= span[cid, 0]) & (level < span[cid, 1])
    own = np.bincount(cid, graph.comp_us * inside, minlength=c)
    potential = per_level[span[:, 1]] - per_level[span[:, 0]] - own
    comm = np.bincount(cid[src], ec, minlength=c) + np.bincount(cid[dst], ec, minlength=c)
    return level, span, potential, comm

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
"""

from dataclasses import dataclass

import numpy as np

from pardnn.graph.levels import top_levels
from pardnn.placers.pardnn.fenwick import FenwickTree
from pardnn.placers.pardnn.cut_edges import ClusterLinks


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
    cid = slices.cluster
    ok = _cluster_allowed(slices, graph.group, allowed)
    cdev = np.full(slices.num_clusters, -1, np.int64)
    cdev[:slices.num_primary] = _primary_devices(ok[:slices.num_primary])
    level, span, potential, comm = _timeline(graph, slices, edge_cost)
    links = ClusterLinks(graph, cluster, slices, cdev)
    merged = [c for c in range(slices.num_primary, slices.num_clusters)
              if comm[c] > potential[c] and links.merge(c, ok[c])]
    values = np.zeros((cluster.num_devices, int(level.max(initial=0)) + 1))
    done = cdev[cid] >= 0
    np.add.at(values, (cdev[cid][done], level[done]), graph.comp_us[done])
    work = FenwickTree(values)
    weight = np.bincount(cid, graph.comp_us, minlength=slices.num_clusters)
    rest = np.flatnonzero(cdev < 0)
    comp = graph.comp_us.tolist()
    level_list = level.tolist()
    for c in rest[np.argsort(-weight[rest], kind="stable")].tolist():
        loads = work.range_sum(int(span[c, 0]), int(span[c, 1]))
        d = links.lalb(c, loads, ok[c])
        nodes = links.members[c]
        work.add([level_list[n] for n in nodes], d, [comp[n] for n in nodes])
    return Mapping(cdev[cid].astype(np.int32), links, ok, weight, level, span, work,
                   np.asarray(merged, np.int64))


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

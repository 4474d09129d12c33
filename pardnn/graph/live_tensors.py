"""Tensors alive across an op, whatever the schedule: the bytes its ancestors produce
that it or its descendants read (docs/bounds.md, "Least memory"). What the
least-memory bound (pardnn.repair.live_at_once) ranks ops by, and where the stage
partition (pardnn.placers.stages) folds a training step: at its busiest op, the loss.

Ancestry for up to CHOSEN ops is one bit mask per node, set by one sweep in
topological order and one in reverse, so the bytes of every chosen op take
O(CHOSEN (V + E)) (`_ancestor_bytes`, a kernel).
"""

from __future__ import annotations

import numpy as np

from pardnn.base.compiled import kernel
from pardnn.graph.costgraph import NORMAL
from pardnn.graph.levels import top_levels

CHOSEN = 63     # ops per bit-mask sweep: the bits of a non-negative int64


def copy_floor(graph) -> np.ndarray:
    """Per edge: the fewest bytes a received copy of its tensor (producer, slot) holds,
    the least `edge_bytes` over the edges carrying that tensor (the emulator sizes a
    copy by the first edge of the tensor to its device)."""
    m = graph.num_edges
    if m == 0:
        return np.zeros(0, np.int64)
    key = graph.edge_src.astype(np.int64) * (int(graph.edge_slot.max(initial=0)) + 2) + graph.edge_slot + 1
    order = np.argsort(key, kind="stable")
    first = np.ones(m, bool)
    first[1:] = key[order][1:] != key[order][:-1]
    least = np.minimum.reduceat(graph.edge_bytes[order].astype(np.int64), np.flatnonzero(first))
    floor = np.empty(m, np.int64)
    floor[order] = least[np.cumsum(first) - 1]
    return floor


def own_bytes(graph) -> np.ndarray:
    """Per node: what it allocates when it starts, its NORMAL output and its scratch."""
    return np.where(graph.kind == NORMAL, graph.out_bytes, 0).astype(np.int64) + graph.temp_bytes


def busiest_ops(graph, count, pool) -> np.ndarray:
    """The `count` ops (that take time) with the most `ancestor_bytes` plus their own
    bytes, by node id, from `ranked_ops(graph, pool)`."""
    ops, live, _ = ranked_ops(graph, pool)
    return np.sort(ops[np.lexsort((ops, -live))[:count]])


def ranked_ops(graph, pool, counted=None, among=None) -> tuple:
    """(ops, their `ancestor_bytes`, their ancestors' cut bytes; each plus the op's own
    bytes) for the `pool` ops (that take time; of `among`, bool per node, when given)
    whose position the most output bytes cross (plus their scratch), in the topological
    order by depth (longest path from a source, then id), which does not depend on how
    the graph's file listed its nodes. `counted` (bool per node, None: all): the
    producers whose outputs count."""
    n = graph.num_nodes
    data = graph.edge_slot >= 0
    normal = np.where(_counted(graph, counted), graph.out_bytes, 0).astype(float)
    rank = np.empty(n, np.int64)
    rank[np.lexsort((np.arange(n), top_levels(graph, np.ones(n))))] = np.arange(n)
    last = rank.copy()
    np.maximum.at(last, graph.edge_src[data], rank[graph.edge_dst[data]])
    cross = np.zeros(n + 1)
    np.add.at(cross, rank, normal)
    np.add.at(cross, last + 1, -normal)
    cross = np.cumsum(cross)[:n][rank] + graph.temp_bytes
    timed = np.flatnonzero((graph.comp_us > 0) & (True if among is None else among))
    chosen = np.sort(timed[np.lexsort((timed, -cross[timed]))[:pool]])
    sweeps = [ancestor_sweep(graph, chosen[i:i + CHOSEN], counted) for i in range(0, len(chosen), CHOSEN)]
    own = own_bytes(graph)[chosen]
    if not sweeps:
        return chosen, own, own
    return (chosen, np.concatenate([s[0] for s in sweeps]) + own, np.concatenate([s[1] for s in sweeps]) + own)


def ancestor_bytes(graph, ops) -> np.ndarray:
    """Per op of `ops` (at most CHOSEN): bytes of NORMAL outputs that its ancestors
    produce and it or a descendant reads, each producer counted once, as the smaller of
    its output and the largest copy floor among those reads."""
    return ancestor_sweep(graph, ops)[0]


def ancestor_sweep(graph, ops, counted=None) -> tuple:
    """(`ancestor_bytes`, cut bytes) per op of `ops` (at most CHOSEN). The cut bytes
    are those of the set D of its ancestors in pardnn.repair.live_at_once's cut: the
    bytes of NORMAL outputs its ancestors produce and any node outside them reads (it,
    a descendant, or an op beside it), each producer counted as there: so at least the
    least cut over every such D. `counted` (bool per node, None: all): the producers
    whose outputs count."""
    ops = np.asarray(ops, np.int64)
    if len(ops) == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    out = np.where(_counted(graph, counted), graph.out_bytes, 0).astype(np.int64)
    run = _ancestor_bytes.for_size(graph.num_nodes)
    return run(*graph.successor_arrays, graph.edge_slot >= 0, copy_floor(graph), out, ops)


def _counted(graph, counted) -> np.ndarray:
    """bool per node: a NORMAL producer whose output counts (all of them when `counted` is None)."""
    normal = graph.kind == NORMAL
    return normal if counted is None else normal & counted


@kernel
def _ancestor_bytes(succ_ptr, edge_dst, data, floor, out, ops):
    """(`ancestor_bytes`, `ancestor_cut_bytes`) by bit masks: after[v] has bit j when
    v is ops[j] or a descendant, before[u] when u is a strict ancestor of ops[j]."""
    n, m = succ_ptr.shape[0] - 1, ops.shape[0]
    own = np.zeros(n, np.int64)
    for j in range(m):
        own[ops[j]] |= np.int64(1) << np.int64(j)
    after = own.copy()
    for u in range(n):                          # ids are a topological order
        for e in range(succ_ptr[u], succ_ptr[u + 1]):
            after[edge_dst[e]] |= after[u]
    before = np.zeros(n, np.int64)
    for u in range(n - 1, -1, -1):
        acc = np.int64(0)
        for e in range(succ_ptr[u], succ_ptr[u + 1]):
            acc |= before[edge_dst[e]] | own[edge_dst[e]]
        before[u] = acc
    live, cut = np.zeros(m, np.int64), np.zeros(m, np.int64)
    best, most = np.zeros(m, np.int64), np.zeros(m, np.int64)
    for a in range(n):
        if out[a] == 0 or before[a] == 0:
            continue
        touched = np.int64(0)
        crossed = np.int64(0)
        for e in range(succ_ptr[a], succ_ptr[a + 1]):
            if not data[e]:
                continue
            q = before[a] & after[edge_dst[e]]
            x = before[a] & ~before[edge_dst[e]]
            touched |= q
            crossed |= x
            j = 0
            while q != 0 or x != 0:
                if q & 1:
                    best[j] = max(best[j], floor[e])
                if x & 1:
                    most[j] = max(most[j], floor[e])
                q >>= 1
                x >>= 1
                j += 1
        j = 0
        while touched != 0 or crossed != 0:
            if touched & 1:
                live[j] += min(out[a], best[j])
                best[j] = 0
            if crossed & 1:
                cut[j] += min(out[a], most[j])
                most[j] = 0
            touched >>= 1
            crossed >>= 1
            j += 1
    return live, cut


def ancestors(graph, v) -> np.ndarray:
    """Mask of the strict ancestors of node v (a reverse sweep, `_ancestors`)."""
    return _ancestors.for_size(graph.num_nodes)(graph.pred_ptr.astype(np.int64), graph.pred_src.astype(np.int64),
                                                np.int64(v))


@kernel
def _ancestors(pred_ptr, pred_src, v):
    """Marks v's inputs' producers, then theirs, in decreasing id (a reverse
    topological order)."""
    n = pred_ptr.shape[0] - 1
    mark = np.zeros(n, np.bool_)
    reached = np.zeros(n, np.bool_)
    reached[v] = True
    for u in range(v, -1, -1):
        if reached[u]:
            for i in range(pred_ptr[u], pred_ptr[u + 1]):
                mark[pred_src[i]] = True
                reached[pred_src[i]] = True
    return mark


def descendants(graph, v) -> np.ndarray:
    """Mask of the strict descendants of node v (a forward sweep, `_descendants`)."""
    return _descendants.for_size(graph.num_nodes)(*graph.successor_arrays, np.int64(v))


@kernel
def _descendants(succ_ptr, edge_dst, v):
    """Marks v's consumers, then theirs, in increasing id (a topological order)."""
    n = succ_ptr.shape[0] - 1
    mark = np.zeros(n, np.bool_)
    reached = np.zeros(n, np.bool_)
    reached[v] = True
    for u in range(v, n):
        if reached[u]:
            for e in range(succ_ptr[u], succ_ptr[u + 1]):
                mark[edge_dst[e]] = True
                reached[edge_dst[e]] = True
    return mark

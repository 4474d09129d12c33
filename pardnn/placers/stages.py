"""Stage partition: a candidate for near-chain graphs that do not fit one device.

When a graph has little parallelism, what is left to decide is where to cut it into
stages that fit, with little traffic between them (RaNNC, paper 000 §III-C; Piper,
paper 003 §4: a dynamic program over contiguous stretches). A training graph runs its
layers forward, then backward in reverse, and a layer's backward ops read the
activations its forward ops saved; so the order that is cut is the graph *folded* at
the turning point (the loss): a node after it takes the position of the oldest
forward tensor it reads. A stage is then a contiguous stretch of this order: the
forward and the backward of the same layers, two stretches of the topological order.

Colocation groups are atomic: a group sits at the latest folded position of its
members. A stage's memory is its groups' resident state plus the activations they
save across the turn (what a training step holds at its peak), and every stage keeps
room for the largest op's input and output. The dynamic program picks at most K
stages, each within STAGE_FILL of capacity, minimising the time of the tensors crossing the cuts on the
mean link; it runs over the whole order with range-minimum tables, O(K G log G) for
G groups. Stage s goes to device s. docs/algorithm.md, "Candidates", explains the
choices.
"""

from __future__ import annotations

import numpy as np

from pardnn.graph import NORMAL
from pardnn.graph.constraints import allowed_devices
from pardnn.graph.live_tensors import CHOSEN, ancestors, busiest_ops
from pardnn.graph.node_memory import resident_bytes

STAGE_FILL = 0.9     # a stage may fill this share of a device's capacity (the estimate is rough)
TURN_POOL = 4 * CHOSEN  # ops whose live tensors are counted to find the turn


def place(graph, cluster, timings=None) -> np.ndarray:
    """Device (int32) per node: the order folded at the busiest op cut into stages that
    fit, or the K stages whose largest memory is least when none do."""
    return _staged(graph, cluster, fold_positions, balanced=True)


def place_at_live_peak(graph, cluster, timings=None) -> np.ndarray:
    """The same, folded where the bytes of live tensors peak in id order, the last stage
    taking the rest when no K stages fit: the stage partition before the busiest-op
    fold, kept as a second candidate because on some graphs its stages refine to a
    faster step (a 1k-node near-chain on two devices at 0.6x memory: 110.1 ms against
    115.1 ms; docs/algorithm.md, "Candidates")."""
    return _staged(graph, cluster, live_peak_positions, balanced=False)


def _staged(graph, cluster, fold, balanced) -> np.ndarray:
    """Device per node: the order `fold(graph)` gives cut into stages that fit."""
    if graph.num_nodes == 0:
        return np.zeros(0, np.int32)
    pos, saved = fold(graph)
    seq, rank = _group_sequence(graph, pos)
    held = resident_bytes(graph) + np.where(saved, graph.out_bytes, 0)
    mem = np.concatenate([[0.0], np.cumsum(np.bincount(graph.group, held, graph.num_groups)[seq])])
    cut = _cut_costs(graph, cluster, rank)
    working = 2.0 * float(np.max(graph.out_bytes, initial=0))     # an op's input and output
    cap = STAGE_FILL * float(cluster.capacity.min()) - working
    bounds = _cheapest_cuts(mem, cut, cap, cluster.num_devices, balanced)
    stage_of_rank = np.repeat(np.arange(len(bounds) - 1), np.diff(bounds))
    group_dev = np.empty(graph.num_groups, np.int32)
    group_dev[seq] = stage_of_rank
    allowed = allowed_devices(graph, cluster)
    barred = ~allowed[np.arange(graph.num_groups), group_dev]
    group_dev[barred] = np.argmax(allowed[barred], axis=1)      # pinned elsewhere: first allowed
    return group_dev[graph.group]


def fold_positions(graph):
    """(position in the folded order, saved: the node's output is live across the turn)
    per node (see the module docstring). The turn is the busiest op (the most bytes
    its ancestors produce for it and its descendants: the loss of a training step);
    the forward part is the turn and its ancestors, in id order; every other node takes
    the oldest forward output it reads, else its inputs' least position, else (a
    source such as an optimizer slot's variable, or a constant) its readers' least
    position."""
    n = graph.num_nodes
    turn = _turning_point(graph)
    forward = ancestors(graph, turn)
    forward[turn] = True
    data = (graph.edge_slot >= 0) & (graph.kind[graph.edge_src] == NORMAL)
    src, dst = graph.edge_src[data].astype(np.int64), graph.edge_dst[data].astype(np.int64)
    pos = np.where(forward, np.arange(n), -1).astype(np.int64)
    oldest = np.full(n, n, np.int64)
    np.minimum.at(oldest, dst, np.where(forward[src], src, n))
    direct = ~forward & (oldest < n)
    pos[direct] = oldest[direct]
    _inherit(graph, pos, forward, turn)
    saved = forward & (graph.kind == NORMAL)
    read_after = np.zeros(n, bool)
    read_after[src[~forward[dst]]] = True
    return pos, saved & read_after


def _turning_point(graph) -> int:
    """The busiest op (pardnn.graph.live_tensors.busiest_ops), or the last node when no
    op takes time."""
    top = busiest_ops(graph, 1, TURN_POOL)
    return int(top[0]) if len(top) else graph.num_nodes - 1


def _inherit(graph, pos, forward, turn):
    """Nodes without a position (-1) take their inputs' least position, preferring
    inputs outside the forward part, in id order; those still without one take their
    readers' least position, in reverse id order; the rest, the turn's."""
    ptr, pred = graph.pred_ptr.tolist(), graph.pred_src.tolist()
    p, fwd = pos.tolist(), forward.tolist()
    for v in np.flatnonzero(pos < 0).tolist():
        ins = [p[u] for u in pred[ptr[v]:ptr[v + 1]] if p[u] >= 0]
        later = [p[u] for u in pred[ptr[v]:ptr[v + 1]] if p[u] >= 0 and not fwd[u]]
        p[v] = min(later) if later else min(ins) if ins else -1
    sptr, succ = graph.succ_ptr.tolist(), graph.edge_dst.tolist()
    for v in reversed(np.flatnonzero(np.asarray(p) < 0).tolist()):
        outs = [p[w] for w in succ[sptr[v]:sptr[v + 1]] if p[w] >= 0]
        p[v] = min(outs) if outs else turn
    pos[:] = p


def live_peak_positions(graph):
    """fold_positions with the turn where the bytes of live tensors peak in id order:
    a node after it takes the oldest output before the turn it reads, else its later
    inputs' least position, else the turn's."""
    n = graph.num_nodes
    data = (graph.edge_slot >= 0) & (graph.kind[graph.edge_src] == NORMAL)
    src, dst = graph.edge_src[data].astype(np.int64), graph.edge_dst[data].astype(np.int64)
    last_use = np.full(n, -1, np.int64)
    np.maximum.at(last_use, src, dst)
    turn = _live_peak(graph, last_use)
    pos = np.arange(n, dtype=np.int64)
    oldest = np.full(n, n, np.int64)
    np.minimum.at(oldest, dst, np.where(src <= turn, src, n))
    after = np.arange(turn + 1, n)
    pos[after[oldest[after] < n]] = oldest[after][oldest[after] < n]
    ptr, pred, p = graph.pred_ptr.tolist(), graph.pred_src.tolist(), pos.tolist()
    for v in after[oldest[after] == n].tolist():
        ins = [p[u] for u in pred[ptr[v]:ptr[v + 1]] if u > turn]
        p[v] = min(ins) if ins else turn
    saved = (np.arange(n) <= turn) & (last_use > turn) & (graph.kind == NORMAL)
    return np.asarray(p, np.int64), saved


def _live_peak(graph, last_use) -> int:
    """The id where the bytes of outputs still to be read peak (each output live from its
    producer to its last data consumer), or the last node when none is read."""
    n = graph.num_nodes
    live = np.flatnonzero(last_use > np.arange(n))
    if len(live) == 0:
        return n - 1
    diff = np.zeros(n + 1)
    np.add.at(diff, live, graph.out_bytes[live].astype(float))
    np.add.at(diff, last_use[live], -graph.out_bytes[live].astype(float))
    return int(np.argmax(np.cumsum(diff[:-1])))


def _group_sequence(graph, pos):
    """(groups in folded order, each group's rank in it)."""
    gpos = np.full(graph.num_groups, -1, np.int64)
    np.maximum.at(gpos, graph.group, pos)
    seq = np.lexsort((np.arange(graph.num_groups), gpos))
    rank = np.empty_like(seq)
    rank[seq] = np.arange(len(seq))
    return seq, rank


def _cut_costs(graph, cluster, rank) -> np.ndarray:
    """cut[j]: time (us, mean link) of the tensors crossing the boundary before rank j."""
    g = graph.num_groups
    latency, bandwidth = cluster.mean_link()
    a, b = rank[graph.group[graph.edge_src]], rank[graph.group[graph.edge_dst]]
    cross = a != b
    lo, hi = np.minimum(a, b)[cross], np.maximum(a, b)[cross]
    cost = latency + graph.edge_bytes[cross] / bandwidth
    diff = np.zeros(g + 2)
    np.add.at(diff, lo + 1, cost)
    np.add.at(diff, hi + 1, -cost)
    return np.cumsum(diff)[:g + 1]


def _cheapest_cuts(mem, cut, cap, k, balanced=True) -> np.ndarray:
    """Stage boundaries (ranks, first 0, last G) of at most k stages that each fit `cap`,
    with the least total cut cost; the fewest stages among equals. When no k stages fit,
    the k stages whose largest memory is least (`_balanced`), or with `balanced` False
    the order filled greedily, the last stage taking the rest; the repair follows."""
    g = len(mem) - 1
    lo = np.searchsorted(mem, mem - cap, side="left")      # stage [i, j) fits iff i >= lo[j]
    best = np.full(g + 1, np.inf)
    best[0] = 0.0
    back, total = [], []
    for _ in range(k):
        value = best + np.where(np.arange(g + 1) > 0, cut, 0.0)
        arg = _range_argmin(value, lo[1:], np.arange(1, g + 1))
        best = np.full(g + 1, np.inf)
        ok = arg >= 0
        best[1:][ok] = value[arg[ok]]
        back.append(np.concatenate([[-1], arg]))
        total.append(best[g])
    if not np.isfinite(min(total)):
        return _balanced(mem, k) if balanced else _greedy(mem, cap, k)
    stages = int(np.argmin(total)) + 1          # first minimum: the fewest stages
    return _walk_back(back[:stages], g)


def _range_argmin(values, lo, hi) -> np.ndarray:
    """Per query q: argmin of values[lo[q]:hi[q]] (first on ties), -1 when empty or all inf."""
    n = len(values)
    table = [np.arange(n)]
    span = 1
    while 2 * span <= n:
        prev = table[-1]
        left, right = prev[:n - 2 * span + 1], prev[span:n - span + 1]
        table.append(np.where(values[right] < values[left], right, left))
        span *= 2
    empty = hi <= lo
    lo, hi = np.where(empty, 0, lo), np.where(empty, 1, hi)      # any valid range, discarded below
    level = np.floor(np.log2(hi - lo)).astype(np.int64)
    out = np.full(len(lo), -1, np.int64)
    for lv in np.unique(level):
        q = np.flatnonzero(level == lv)
        left = table[lv][lo[q]]
        right = table[lv][hi[q] - (1 << lv)]
        out[q] = np.where(values[right] < values[left], right, left)
    out[empty | ~np.isfinite(values[np.maximum(out, 0)])] = -1
    return out


def _walk_back(back, g) -> np.ndarray:
    bounds = [g]
    for arg in reversed(back):
        if bounds[-1] == 0:
            break
        bounds.append(int(arg[bounds[-1]]))
    return np.asarray(bounds[::-1], np.int64)


def _balanced(mem, k) -> np.ndarray:
    """Boundaries of at most k contiguous stages whose largest memory is least: the
    least cap (bisected over the bytes) at which filling stages greedily in order
    needs at most k of them."""
    lo, hi = max(float(np.max(np.diff(mem), initial=0.0)), 0.0), float(mem[-1])
    while hi - lo > max(1.0, 1e-9 * hi):
        mid = (lo + hi) / 2
        if len(_greedy(mem, mid, len(mem))) - 1 <= k:
            hi = mid
        else:
            lo = mid
    return _greedy(mem, hi, k)


def _greedy(mem, cap, k) -> np.ndarray:
    g = len(mem) - 1
    bounds = [0]
    while len(bounds) < k and bounds[-1] < g:
        j = int(np.searchsorted(mem, mem[bounds[-1]] + cap, side="right")) - 1
        bounds.append(min(max(j, bounds[-1] + 1), g))
    if bounds[-1] < g:
        bounds.append(g)
    return np.asarray(bounds, np.int64)

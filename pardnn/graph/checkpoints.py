"""What to recompute: the forward pass cut into segments at its narrow points, every op
of a segment recomputed but the tensors that cross a cut (the checkpoints), issue 51.

After Chen et al. 2016 ("Training Deep Nets with Sublinear Memory Cost", §4: split the
forward pass into segments, keep only each segment's input, recompute the rest one
segment at a time), on an op graph rather than a chain of layers:

- *saved*: the forward ops whose output the backward pass reads (the activations a step
  keeps from its forward pass to its backward pass: pardnn.graph.passes.is_backward
  tells the passes apart);
- *recomputable*: forward NORMAL ops with a data input whose type holds no state and
  draws no random numbers (`STATEFUL`); sources (variable reads, feeds, constants) stay;
- *crossing bytes* at a position t of the forward ops in topological order: the bytes of
  the recomputable ops' outputs made at or before t and read by a recomputable op after
  t. A cut at t keeps those tensors (they are the checkpoints there), and no data edge
  between recomputable ops crosses it, so the recomputed ops of two segments never read
  each other;
- `plan(graph, segments)` places `segments - 1` cuts near the quantiles of the saved
  bytes (each segment saves about as much), each at the narrowest position of its
  window, and recomputes every saved op that is not a checkpoint, with the recomputable
  ops it needs, back to the cuts;
- a plan's `estimate` scores it: the checkpoints plus the largest segment's saved
  bytes (what one segment's recomputation holds at once in the backward pass), the
  figure Chen et al. minimise; `recompute_us`, the compute its copies add;
- without `arithmetic`, compute-bound ops are kept (selective recomputation).

Every function is O(V + E) numpy passes over the forward ops, but the closure walk.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

import numpy as np

from pardnn.graph.costgraph import NORMAL
from pardnn.graph.op_rates import COMPUTE

# Op types whose second run is not the first: random draws, state, I/O, queues.
STATEFUL = re.compile(
    r"Random|Multinomial|Shuffle|Dropout|Variable|Assign|Scatter|Resource|Stack|TensorArray|Queue|Iterator|"
    r"Print|Save|Restore|Summary|Placeholder|Const$|Barrier|Mutex|Lookup|Accumulat|Stateful|Recv|Send")


@dataclass(frozen=True)
class Plan:
    """One recomputation plan."""

    segments: int           # how many segments the forward pass was cut into
    arithmetic: bool        # compute-bound ops (MatMul, convolutions) recomputed too, or kept
    ops: np.ndarray         # int64: the ops to recompute
    checkpoints: np.ndarray  # int64: saved ops kept (they cross a cut, or cannot be recomputed)
    saved_bytes: int        # bytes kept from the forward to the backward pass before
    kept_bytes: int         # bytes still kept with the plan
    estimate: int           # kept bytes plus the largest segment's recomputed bytes
    recompute_us: float     # compute time the copies add
    cuts: np.ndarray = field(repr=False, default=None)       # positions of the cuts among the forward ops
    position: np.ndarray = field(repr=False, default=None)   # per node: its position among them, or -1


def recomputable_ops(graph, backward) -> np.ndarray:
    """bool per node: *recomputable* as the module docstring says, outside the backward
    pass `backward` (bool per node): what any plan may copy, and no other op."""
    data = graph.edge_slot >= 0
    has_input = np.zeros(graph.num_nodes, bool)
    has_input[graph.edge_dst[data]] = True
    clean = np.array([not STATEFUL.search(op) for op in graph.ops], bool)
    return ~backward & (graph.kind == NORMAL) & has_input & clean & (graph.out_bytes > 0)


def passes(graph, readers, backward):
    """(recomputable, saved): bool per node, as the module docstring says, for the
    backward ops `readers` that read recomputed copies (the backward pass: `backward`)."""
    src, dst = graph.edge_src, graph.edge_dst
    data = graph.edge_slot >= 0
    recomputable = recomputable_ops(graph, backward)
    saved = np.zeros(graph.num_nodes, bool)
    saved[src[data & readers[dst] & ~backward[src]]] = True
    return recomputable, saved & (graph.kind == NORMAL)


def plan(graph, segments, facts, arithmetic=True) -> Plan:
    """The plan with `segments` segments (see the module docstring); `facts` are
    `passes`'s. Without `arithmetic`, the compute-bound ops (pardnn.graph.op_rates:
    MatMul, convolutions) are kept, not recomputed: the selective recomputation of
    Korthikanti et al. (MLSys 2023), which frees the cheap ops' large outputs (softmax,
    activations, norms) for a fraction of the time."""
    recomputable, saved = facts
    if not arithmetic:
        recomputable = recomputable & (graph.rate_class != COMPUTE)
    fwd = np.flatnonzero(recomputable)
    pos = np.full(graph.num_nodes, -1, np.int64)
    pos[fwd] = np.arange(len(fwd))
    crossing, last = _crossing(graph, pos, len(fwd))
    worth = np.where(saved[fwd], graph.out_bytes[fwd], 0).astype(np.int64)
    cuts = _cuts(np.cumsum(worth), crossing, segments)
    checkpoint = np.zeros(graph.num_nodes, bool)
    for t in cuts.tolist():
        checkpoint[fwd[(np.arange(len(fwd)) <= t) & (last > t)]] = True
    ops = _closure(graph, saved & recomputable & ~checkpoint, recomputable & ~checkpoint)
    return Plan(segments, arithmetic, ops, *_figures(graph, ops, saved, pos, cuts), cuts=cuts, position=pos)


def narrowed(graph, plan_, ops, saved) -> Plan:
    """`plan_` recomputing only `ops` (a subset of its ops: pardnn.graph.recompute drops
    the segments that nothing in the backward pass waits for), its figures again."""
    ops = np.asarray(ops, np.int64)
    return replace(plan_, ops=ops, **dict(zip(
        ("checkpoints", "saved_bytes", "kept_bytes", "estimate", "recompute_us"),
        _figures(graph, ops, saved, plan_.position, plan_.cuts))))


def _figures(graph, ops, saved, pos, cuts) -> tuple:
    """(checkpoints, saved bytes, kept bytes, estimate, added compute) of recomputing `ops`."""
    kept = (saved & ~ops_mask(graph, ops)) | _inputs(graph, ops)
    seg = np.searchsorted(cuts, pos[ops], side="left")
    per_segment = np.bincount(seg, graph.out_bytes[ops] * saved[ops], minlength=len(cuts) + 1)
    kept_bytes = int(graph.out_bytes[kept].sum())
    return (np.flatnonzero(kept), int(graph.out_bytes[saved].sum()), kept_bytes,
            kept_bytes + int(per_segment.max(initial=0)), float(graph.comp_us[ops].sum()))


def ops_mask(graph, ops) -> np.ndarray:
    mask = np.zeros(graph.num_nodes, bool)
    mask[np.asarray(ops, np.int64)] = True
    return mask


def _inputs(graph, ops) -> np.ndarray:
    """bool per node: a NORMAL op outside `ops` whose output a recomputed op reads."""
    inside = ops_mask(graph, ops)
    data = (graph.edge_slot >= 0) & inside[graph.edge_dst] & ~inside[graph.edge_src]
    mask = np.zeros(graph.num_nodes, bool)
    mask[graph.edge_src[data]] = True
    return mask & (graph.kind == NORMAL)


def _crossing(graph, pos, count):
    """(bytes crossing each position, last position that reads each forward op's output)."""
    src, dst = graph.edge_src, graph.edge_dst
    inner = (graph.edge_slot >= 0) & (pos[src] >= 0) & (pos[dst] >= 0)
    last = np.full(count, -1, np.int64)
    np.maximum.at(last, pos[src[inner]], pos[dst[inner]])
    made = np.arange(count)
    live = last > made
    delta = np.zeros(count + 1, np.int64)
    fwd_bytes = graph.out_bytes[np.flatnonzero(pos >= 0)]
    np.add.at(delta, made[live], fwd_bytes[live])
    np.add.at(delta, last[live], -fwd_bytes[live])
    return np.cumsum(delta[:count]), last


def _cuts(cumulative, crossing, segments) -> np.ndarray:
    """Positions of the cuts: for each quantile of the saved bytes, the narrowest
    position within half a segment of it (ties to the nearest the quantile, then the
    earliest)."""
    count = len(cumulative)
    total = int(cumulative[-1]) if count else 0
    if total == 0 or segments < 2:
        return np.zeros(0, np.int64)
    cuts = []
    for j in range(1, segments):
        lo = int(np.searchsorted(cumulative, total * (j - 0.5) / segments))
        hi = int(np.searchsorted(cumulative, total * (j + 0.5) / segments))
        lo, hi = max(lo, cuts[-1] + 1 if cuts else 0), min(max(hi, lo + 1), count - 1)
        if lo < hi:
            target = int(np.searchsorted(cumulative, total * j / segments))
            at = np.arange(lo, hi)
            cuts.append(int(at[np.lexsort((at, np.abs(at - target), crossing[lo:hi]))[0]]))
    return np.array(cuts, np.int64)


def _closure(graph, start, allowed) -> np.ndarray:
    """int64: the ops of `start` and the `allowed` ops they read, transitively."""
    inside = start.copy()
    frontier = np.flatnonzero(start)
    src, ptr, eid = graph.pred_src, graph.pred_ptr, graph.pred_eid
    slot = graph.edge_slot
    while len(frontier):
        lo, hi = ptr[frontier], ptr[frontier + 1]
        idx = np.concatenate([np.arange(a, b) for a, b in zip(lo.tolist(), hi.tolist())]) if len(frontier) else []
        idx = np.asarray(idx, np.int64)
        preds = src[idx][slot[eid[idx]] >= 0]
        new = np.unique(preds[allowed[preds] & ~inside[preds]])
        inside[new] = True
        frontier = new
    return np.flatnonzero(inside)

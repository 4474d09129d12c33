"""What every schedule holds at once, summed over the devices, at the start of one op
(docs/bounds.md, "Least memory": the live-tensor bound).

Take an op n that takes time, and any emulated schedule of any placement; t is the
instant n starts. The nodes finished by t form a down-closed set D (a node finishes
after its inputs' producers), holding every ancestor of n and neither n nor any
descendant. A NORMAL node a in D with a data consumer c outside D (c finishes after
t) has its tensor alive at t: in a's own buffer (c on a's device, or a copy for c not
yet landed, which keeps a's buffer) or in a received copy on c's device (landed, and
kept until c finishes). Distinct producers hold distinct buffers. So at t the devices
hold together at least
    resident state of every group + n's own output and scratch
    + min over such D of the sum, over a in D read outside D, of a's smallest buffer,
where a's smallest buffer is the smaller of its output and the largest copy floor
(pardnn.repair.working_sets.copy_floor) among its tensors read outside D. The
minimum over D is a minimum cut (`cut_bytes`): node a on the source side is a in D;
an infinite arc c -> u for each edge u -> c keeps D down-closed; n's inputs are tied to
the source and n to the sink; and a's buffer is priced by a chain of arcs from a to
auxiliary nodes, one per distinct floor level of its out-edges, each tied to the
consumers reading at that level or above, so that a pays the largest level read
outside D. OR-Tools' max flow (C++) solves it, O(V + E) arcs per op.

Which ops: a cut costs a max flow, so it runs for the CUTS ops with the most bytes in
a cheaper bound of the same kind, pardnn.graph.live_tensors.ancestor_bytes (D = the
ancestors of n alone, read by n or a descendant: a subset of every cut's bytes),
among the POOL ops whose topological position the most output bytes cross. Any
choice gives a bound.
"""

from __future__ import annotations

import numpy as np

from pardnn.graph import NORMAL
from pardnn.graph.checkpoints import recomputable_ops
from pardnn.graph.passes import backward_pass
from pardnn.graph.live_tensors import CHOSEN, ancestors, copy_floor, descendants, own_bytes, ranked_ops
from pardnn.repair.footprint import distinct

POOL = 4 * CHOSEN       # ops whose cuts are bounded, to choose the max flows from
CUT_WORK = 2_000_000    # arcs solved for, over the max flows of one graph: no flow starts beyond it


def held_at_once(graph) -> tuple:
    """(op, bytes): the op whose start the most bytes are held at, over the devices
    together, beyond the groups' resident state (module docstring), among the POOL
    ops; (-1, 0) when no op takes time. The ancestors' bytes (D = the op's ancestors
    alone, read by it or a descendant) are a bound already; cuts run in decreasing
    order of an upper bound on them (the cut of D = the ancestors), until the next
    upper bound cannot beat the best, or CUT_WORK arcs have been solved."""
    ops, live, upper = ranked_ops(graph, POOL)
    if len(ops) == 0:
        return -1, 0
    own = own_bytes(graph)[ops]
    best = int(np.argmax(live))
    op, held = int(ops[best]), int(live[best])
    network = None
    for i in np.lexsort((ops, -upper)).tolist():
        if upper[i] <= held:
            break
        network = network or CutNetwork(graph)
        if network.solved > CUT_WORK:
            break
        value = network.cut(int(ops[i])) + int(own[i])
        if value > held:
            op, held = int(ops[i]), value
    return op, held


def kept_at_once(graph) -> tuple:
    """(op, bytes): the op of the backward pass (pardnn.graph.passes.backward_pass)
    whose start the most bytes are held at, over the devices together, beyond the
    groups' resident state, counting only the tensors no recomputation makes again
    (docs/bounds.md, "Least memory": the kept-tensor bound); (-1, 0) when no backward
    op takes time.

    Take a backward op n and a producer a among its ancestors that the recompute lever
    never copies (pardnn.graph.checkpoints.recomputable_ops: a backward op, a random or
    stateful one, a source) with a data consumer c that is n or a descendant. The
    lever copies forward ops only and rewires only the edges out of the ops it copies:
    a keeps its edge to c, it stays an ancestor of n, and no path from n, which starts
    in the backward pass, passes a rewired edge. So in every schedule of every graph the
    lever makes, a's tensor is alive when n starts, as in `held_at_once`'s proof with
    D = n's ancestors (`ancestor_bytes`, over these producers only)."""
    backward = backward_pass(graph)
    kept = ~recomputable_ops(graph, backward)
    ops, live, _ = ranked_ops(graph, POOL, counted=kept, among=backward)
    if len(ops) == 0:
        return -1, 0
    best = int(np.lexsort((ops, -live))[0])
    return int(ops[best]), int(live[best])


class CutNetwork:
    """The arcs every op's cut shares (module docstring); `cut(n)` adds n's ties."""

    def __init__(self, graph):
        n = graph.num_nodes
        src, dst = graph.edge_src.astype(np.int64), graph.edge_dst.astype(np.int64)
        out = np.where(graph.kind == NORMAL, graph.out_bytes, 0).astype(np.int64)
        data = np.flatnonzero((graph.edge_slot >= 0) & (out[src] > 0))
        level = np.minimum(copy_floor(graph)[data], out[src[data]])
        data, level = data[level > 0], level[level > 0]
        # one auxiliary node per (producer, distinct level), numbered from n
        order = np.lexsort((level, src[data]))
        data, level = data[order], level[order]
        first = distinct(src[data] * (int(level.max(initial=0)) + 1) + level)
        aux = n + np.cumsum(first) - 1
        starts = np.flatnonzero(first)
        below = np.zeros(len(starts), np.int64)       # the producer's next lower level, or 0
        same = src[data[starts[1:]]] == src[data[starts[:-1]]]
        below[1:] = np.where(same, level[starts[:-1]], 0)
        price = level[starts] - below
        # an edge at level L is tied to every aux node of its producer with level <= L:
        # the aux ids of one producer are consecutive, from its first one to the edge's
        first_aux = np.maximum.accumulate(np.where(distinct(src[data]), aux, 0))
        count = aux - first_aux + 1
        edge = np.repeat(np.arange(len(data)), count)
        tied = first_aux[edge] + (np.arange(len(edge)) - np.repeat(np.cumsum(count) - count, count))
        self.infinite = int(price.sum()) + 1       # more than any cut of the priced arcs
        self.nodes = int(aux.max(initial=n - 1)) + 1         # the graph's nodes and the auxiliary ones
        self.tails = np.concatenate([dst, src[data[starts]], tied]).astype(np.int64)
        self.heads = np.concatenate([src, aux[starts], dst[data[edge]]]).astype(np.int64)
        self.caps = np.concatenate([np.full(len(dst), self.infinite), price,
                                    np.full(len(edge), self.infinite)]).astype(np.int64)
        self.graph = graph
        self.solved = 0                 # arcs of the flows solved so far

    def cut(self, n: int) -> int:
        """Least bytes held at op n's start by NORMAL buffers finished before it. n's
        ancestors are on the source side of every cut and n with its descendants on
        the sink side, so they are merged into the terminals: the flow runs on the ops
        beside n (neither) and the auxiliary nodes alone."""
        from ortools.graph.python import max_flow
        graph = self.graph
        side = np.zeros(self.nodes, np.int8)                 # 0 beside n, 1 source, 2 sink
        side[:graph.num_nodes][ancestors(graph, n)] = 1
        side[:graph.num_nodes][descendants(graph, n)] = 2
        side[n] = 2
        tail, head = side[self.tails], side[self.heads]
        keep = (tail != 2) & (head != 1)        # arcs out of the sink or into the source carry nothing
        beside = int(np.count_nonzero(side == 0))
        source, sink = beside, beside + 1
        ids = np.where(side == 1, source, np.where(side == 2, sink, np.cumsum(side == 0) - 1))
        tails, heads, caps = ids[self.tails[keep]], ids[self.heads[keep]], self.caps[keep]
        # an "infinite" arc lower than any cut is only a weaker bound, never a wrong one:
        # kept so that no sum of capacities overflows int64
        infinite = min(self.infinite, 2**62 // (len(caps) + 2))
        caps = np.where(caps == self.infinite, infinite, caps)
        self.solved += len(caps)
        flow = max_flow.SimpleMaxFlow()
        flow.add_arcs_with_capacity(tails, heads, caps)
        status = flow.solve(source, sink)
        if status != flow.OPTIMAL:
            raise RuntimeError(f"max flow of the live-tensor bound at op {n}: {status}")
        return int(flow.optimal_flow())

"""Levels with the transfers every placement forces: a floor on each node's start and
on the time after its finish, in any schedule where a device runs one op at a time and
an input from another device lands no earlier than its producer's finish plus a floor
on the transfer (the emulator's schedules, and the exact placer's relaxation of them).

Top levels (pardnn.graph.levels) charge an edge's transfer or nothing; here a node
whose inputs all come from one device cannot start before that device ran them one
after the other, so a fan-in pays either a transfer or the serial time. The proof is in
docs/bounds.md; tests/test_bounds.py checks it against the best placement, found by
trying all of them.
"""

import numpy as np

from pardnn.base.compiled import kernel

PREFIX_CAP = 64   # colocated inputs a node's floor tries one by one (more: a weaker, still valid, term)


def start_and_tail_floors(graph, cost, comm):
    """(est, tail) per node: est(n) <= n's start, tail(n) <= the step's end minus n's
    finish, for node costs `cost` and per-edge transfer floors `comm` (inf: the ends
    always share a device)."""
    n = graph.num_nodes
    cost = np.ascontiguousarray(cost, np.float64)
    floors = earliest_starts.for_size(n)
    est = floors(*input_pairs(graph.edge_src, graph.edge_dst, comm, n), cost)
    rsrc, rdst = n - 1 - graph.edge_dst, n - 1 - graph.edge_src     # the reversed graph, still topological
    tail = floors(*input_pairs(rsrc, rdst, comm, n), cost[::-1].copy())[::-1]
    return est, tail


def input_pairs(src, dst, comm, n):
    """CSR over destinations of the distinct (src, dst) pairs, each with the largest
    floor of its parallel edges (every one of their transfers must land)."""
    key = np.asarray(dst, np.int64) * n + np.asarray(src, np.int64)
    comm = np.asarray(comm, np.float64)
    order = np.lexsort((-comm, key))                 # by pair, costliest first
    key, comm = key[order], comm[order]
    first = np.ones(len(key), bool)
    first[1:] = key[1:] != key[:-1]
    key, comm = key[first], comm[first]
    ptr = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(key // n, minlength=n), out=ptr[1:])
    return ptr, key % n, np.ascontiguousarray(comm, np.float64)


@kernel
def earliest_starts(ptr, src, comm, cost, cap=PREFIX_CAP):
    """est(v), a lower bound on v's start in any placement's emulated schedule (ids in
    topological order; v's inputs are src[ptr[v]:ptr[v+1]], their floors comm).

    An input u on another device lands no earlier than est(u) + cost(u) + comm = r(u).
    The inputs S on v's device run there one at a time before v, each not before its
    est, so v waits at least R(S) = max over t of t + (cost of those in S with est >= t).
    Whatever S is, take the inputs by r, largest first: if the first one not in S is
    the j-th, v waits at least max(r_j, R(first j - 1 inputs)). est(v) is the least of
    these over j (after `cap` inputs, R of the first `cap` alone)."""
    n = cost.shape[0]
    est = np.zeros(n)
    rel = np.empty(cap)
    dur = np.empty(cap)
    for v in range(n):
        lo, hi = ptr[v], ptr[v + 1]
        m = hi - lo
        if m == 0:
            continue
        r = np.empty(m)
        for i in range(m):
            r[i] = est[src[lo + i]] + cost[src[lo + i]] + comm[lo + i]
        order = np.argsort(-r, kind="mergesort")
        best = r[order[0]]                           # no input on v's device
        size = 0
        for j in range(min(m, cap)):
            u = src[lo + order[j]]
            pos = size                               # insert (est, cost) of u, by est
            while pos > 0 and rel[pos - 1] > est[u]:
                rel[pos], dur[pos] = rel[pos - 1], dur[pos - 1]
                pos -= 1
            rel[pos], dur[pos] = est[u], cost[u]
            size += 1
            colocated, suffix = 0.0, 0.0
            for i in range(size - 1, -1, -1):
                suffix += dur[i]
                colocated = max(colocated, rel[i] + suffix)
            remote = r[order[j + 1]] if j + 1 < m else 0.0
            best = min(best, max(remote, colocated))
            if colocated >= remote:                  # later terms are no smaller
                break
            if j == cap - 1:
                best = min(best, colocated)
        est[v] = best
    return est

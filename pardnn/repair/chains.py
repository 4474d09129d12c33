"""Which colocation groups must leave a device before a buffer there is freed, and when:
the rows of memory a move frees, for the overflow repair (pardnn.repair.footprint).

A buffer on a device (a node's output, or a received copy) lives until its last local
consumer finishes (pardnn.emulator.memory). The thesis' M_pot credits the whole buffer,
from the moment it is complete, to that last consumer; but if another consumer runs
later than the moment looked at, moving the last one frees nothing then. So each
buffer gets a *chain* of rows, one per consumer group, latest finish first: with
consumer groups G_0, G_1, ... finishing at f_0 >= f_1 >= ..., row k is the interval
[max(ready, f_{k+1}), f_k) (row 0 ends where the buffer is freed), which G_k's leaving
frees once G_0 .. G_{k-1} have left. Row 0 is active from the start: it is M_pot's
term, less the time others still read the buffer. When a group leaves, the next row
of each of its chains becomes active (and is freed at once if its group left earlier).

The producer's own row frees the buffer while the producer runs (M_pot's second
term), and its whole life if no node on the device reads it.

A received copy is matched to all of its producer's consumers on the device (one
chain per producer and device, shared by the copies of its output slots).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from pardnn.base.compiled import INTERPRETED_BELOW, kernel


class Buffers(NamedTuple):
    """The emulated step's buffers as the repair's kernels read them, by name: the
    `buf_*` columns of a pardnn.emulator.memory.MemoryProfile and its nodes' devices."""

    node: np.ndarray            # int64: the producer
    device: np.ndarray          # int64: where the buffer is held
    owner: np.ndarray           # int64: the local consumer whose finish frees it, or -1
    alloc: np.ndarray           # float64
    ready: np.ndarray           # float64: complete (producer finished, or copy arrived)
    free: np.ndarray            # float64
    nbytes: np.ndarray          # int64
    node_device: np.ndarray     # int64 per node

    @classmethod
    def of(cls, profile) -> "Buffers":
        p = profile
        return cls(p.buf_node, p.buf_device, p.buf_owner, p.buf_alloc, p.buf_ready, p.buf_free, p.buf_bytes,
                   p.node_device)


def buffer_rows(graph, profile, k, on=None):
    """Rows (group, device, start, end, bytes, active, next row) freed by moves: the
    producers' rows, then the consumer chains; `next` is -1 at a chain's end. `on`
    (bool per device), when given, keeps only the buffers on those devices: the rows
    there are the same, in the same order. Graphs of INTERPRETED_BELOW nodes or more
    run the kernel `_rows`, smaller ones numpy (`_rows_by_numpy`): the same rows."""
    p = profile
    on = np.ones(k, bool) if on is None else on
    blocks = _consumers(graph, p, k, on)
    group = graph.group.astype(np.int64)
    if graph.num_nodes < INTERPRETED_BELOW:
        return _rows_by_numpy(group, p, k, on, *blocks)
    return _rows.compiled(group, Buffers.of(p), on, k, *blocks)


def _rows_by_numpy(group, p, k, on, keys, starts, cgroup, cfin):
    """`buffer_rows` by numpy: each buffer's block of consumers found by a search."""
    bufs = np.flatnonzero(on[p.buf_device])
    bkey = p.buf_node[bufs] * k + p.buf_device[bufs]
    at = np.zeros(p.buf_node.shape, np.int64)
    at[bufs] = np.minimum(np.searchsorted(keys, bkey), max(len(keys) - 1, 0))
    found = np.zeros(p.buf_node.shape, bool)
    if len(keys):
        found[bufs] = keys[at[bufs]] == bkey
    own = bufs[p.buf_device[bufs] == p.node_device[p.buf_node[bufs]]]
    run = (group[p.buf_node[own]], p.buf_device[own], p.buf_alloc[own],
           np.where(found[own], p.buf_ready[own], p.buf_free[own]), p.buf_bytes[own],
           np.ones(len(own), bool), np.full(len(own), -1, np.int64))
    chain = _chains(p, np.flatnonzero(found), at, starts, cgroup, cfin)
    shift = np.where(chain[6] >= 0, chain[6] + len(own), -1)
    return tuple(np.concatenate([a, b]) for a, b in zip(run, (*chain[:6], shift)))


@kernel
def _rows(group, buffers, on, k, keys, starts, cgroup, cfin):
    """`_rows_by_numpy` by passes over the Buffers: each one's block of consumers found
    among its producer's (at most k, indexed by producer first) and the rows counted;
    then the producers' rows written, then the chains."""
    buf_node, buf_device, _, alloc, ready, free, nbytes, node_device = buffers
    nbuf, n = buf_node.shape[0], node_device.shape[0]
    of = np.zeros(n + 1, np.int64)                  # keys[of[u]:of[u + 1]] are producer u's
    for i in range(keys.shape[0]):
        of[keys[i] // k + 1] += 1
    for u in range(n):
        of[u + 1] += of[u]
    block = np.full(nbuf, -1, np.int64)
    own, chained = 0, 0
    for b in range(nbuf):
        if on[buf_device[b]]:
            key = buf_node[b] * k + buf_device[b]
            for i in range(of[buf_node[b]], of[buf_node[b] + 1]):
                if keys[i] == key:
                    block[b] = i
                    chained += starts[i + 1] - starts[i]
            own += buf_device[b] == node_device[buf_node[b]]
    size = own + chained
    g, dev, lo, hi = np.empty(size, np.int64), np.empty(size, np.int64), np.empty(size), np.empty(size)
    held, active, nxt = np.empty(size, np.int64), np.zeros(size, np.bool_), np.full(size, -1, np.int64)
    r, c = 0, own
    for b in range(nbuf):
        if on[buf_device[b]] and buf_device[b] == node_device[buf_node[b]]:
            g[r], dev[r], lo[r], held[r] = group[buf_node[b]], buf_device[b], alloc[b], nbytes[b]
            active[r] = True
            hi[r] = ready[b] if block[b] >= 0 else free[b]
            r += 1
    for b in range(nbuf):
        if block[b] < 0:
            continue
        first, last = starts[block[b]], starts[block[b] + 1]
        for pos in range(first, last):
            later = cfin[pos + 1] if pos + 1 < last else -np.inf
            g[c], dev[c], held[c], active[c] = cgroup[pos], buf_device[b], nbytes[b], pos == first
            lo[c] = ready[b] if ready[b] >= later else later
            hi[c] = free[b] if pos == first else cfin[pos]
            nxt[c] = c + 1 if pos + 1 < last else -1
            c += 1
    return g, dev, lo, hi, held, active, nxt


def _consumers(graph, p, k, on):
    """Per (producer, device) key with a data consumer there, on the devices `on`: the
    consumer groups, one entry each with its latest finish, latest first (ties: the
    higher group first). Returns (keys, block starts, groups, finishes); the block of
    keys[i] is starts[i]:starts[i + 1]. Graphs of INTERPRETED_BELOW nodes or more run
    the kernel `_consumer_blocks`, smaller ones numpy's sorts (`_consumers_by_sort`)."""
    if graph.num_nodes < INTERPRETED_BELOW:
        return _consumers_by_sort(graph, p, k, on)
    return _consumer_blocks.compiled(*graph.successor_arrays, np.asarray(graph.edge_slot, np.int64),
                                     p.node_device, graph.group.astype(np.int64), p.node_running[1],
                                     on, graph.num_groups)


def _consumers_by_sort(graph, p, k, on):
    """`_consumers` by two lexsorts of the data edges."""
    data = np.flatnonzero(graph.edge_slot >= 0)
    data = data[on[p.node_device[graph.edge_dst[data]]]]
    v = graph.edge_dst[data]
    ekey = graph.edge_src[data].astype(np.int64) * k + p.node_device[v]
    grp, fin = graph.group[v].astype(np.int64), p.node_running[1][v]
    order = np.lexsort((fin, grp, ekey))
    ekey, grp, fin = ekey[order], grp[order], fin[order]
    last = np.ones(len(ekey), bool)
    last[:-1] = (ekey[1:] != ekey[:-1]) | (grp[1:] != grp[:-1])
    ekey, grp, fin = ekey[last], grp[last], fin[last]
    order = np.lexsort((-grp, -fin, ekey))
    ekey, grp, fin = ekey[order], grp[order], fin[order]
    first = np.ones(len(ekey), bool)
    first[1:] = ekey[1:] != ekey[:-1]
    starts = np.append(np.flatnonzero(first), len(ekey))
    return ekey[first], starts, grp, fin


@kernel
def _consumer_blocks(succ_ptr, edge_dst, edge_slot, node_device, group, finish, on, num_groups):
    """`_consumers` in one pass over the producers (the CSR edges are sorted by
    producer, so keys come in order): each producer's data consumers on devices `on`
    sorted by (device, latest finish first, higher group first) with a Shell sort, and
    a group kept at its first entry of each device, its latest finish."""
    n, m, k = succ_ptr.shape[0] - 1, edge_dst.shape[0], on.shape[0]
    keys, starts = np.empty(m, np.int64), np.empty(m + 1, np.int64)
    grp, fin = np.empty(m, np.int64), np.empty(m)
    most = 0                                        # one producer's consumers at a time
    for u in range(n):
        most = max(most, succ_ptr[u + 1] - succ_ptr[u])
    dev_s, grp_s, idx = np.empty(most, np.int64), np.empty(most, np.int64), np.empty(most, np.int64)
    fin_s = np.empty(most)
    seen = np.full(num_groups, -1, np.int64)        # the key a group was last kept under

    def before(a, b):
        """Entry a sorts before entry b: (device, latest finish first, higher group first)."""
        if dev_s[a] != dev_s[b]:
            return dev_s[a] < dev_s[b]
        if fin_s[a] != fin_s[b]:
            return fin_s[a] > fin_s[b]
        return grp_s[a] > grp_s[b]

    def gather(u):
        """Producer u's data consumers on devices `on` into the scratch arrays; how many."""
        c = 0
        for e in range(succ_ptr[u], succ_ptr[u + 1]):
            v = edge_dst[e]
            if edge_slot[e] >= 0 and on[node_device[v]]:
                dev_s[c], grp_s[c], fin_s[c], idx[c] = node_device[v], group[v], finish[v], c
                c += 1
        return c

    def shell_sort(c):
        """idx[:c] in `before` order, by gaps 1, 4, 13, ... (most producers have few)."""
        gap = 1
        while gap * 3 + 1 < c:
            gap = gap * 3 + 1
        while gap > 0:
            for i in range(gap, c):
                x, j = idx[i], i
                while j >= gap and before(x, idx[j - gap]):
                    idx[j] = idx[j - gap]
                    j -= gap
                idx[j] = x
            gap //= 3

    blocks, out = 0, 0
    for u in range(n):
        c = gather(u)
        shell_sort(c)
        for i in range(c):
            a = idx[i]
            key = u * k + dev_s[a]
            if seen[grp_s[a]] == key:
                continue
            seen[grp_s[a]] = key
            if blocks == 0 or keys[blocks - 1] != key:
                keys[blocks], starts[blocks] = key, out
                blocks += 1
            grp[out], fin[out] = grp_s[a], fin_s[a]
            out += 1
    starts[blocks] = out
    return keys[:blocks], starts[:blocks + 1], grp[:out], fin[:out]


def _chains(p, bufs, at, starts, cgroup, cfin):
    """The chain rows of buffers `bufs` (see the module docstring), in chain order."""
    block = at[bufs]
    count = starts[block + 1] - starts[block]
    buf = np.repeat(bufs, count)
    first_row = np.repeat(np.cumsum(count) - count, count)
    rank = np.arange(len(buf)) - first_row                       # k within the chain
    pos = np.repeat(starts[block], count) + rank
    more = rank + 1 < np.repeat(count, count)
    later = np.where(more, cfin[np.minimum(pos + 1, len(cfin) - 1)], -np.inf)
    lo = np.maximum(p.buf_ready[buf], later)
    hi = np.where(rank == 0, p.buf_free[buf], cfin[pos])
    nxt = np.where(more, np.arange(len(buf)) + 1, -1)
    return cgroup[pos], p.buf_device[buf], lo, hi, p.buf_bytes[buf], rank == 0, nxt

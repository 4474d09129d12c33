"""What moving a colocation group changes in memory and communication, read from one
emulation; the raw material of the overflow repair (pardnn.repair.overflow_repair).

The repair moves whole colocation groups (a variable with its reads, updaters and
optimizer slots: TF would refuse to split them), so the thesis' per-node quantities are
summed over a group's members:

- move cost (Eq. 4.5): comp(n) plus the communication of n's edges to nodes on its own
  device, both directions. The extracted Eq. 4.5 reads "comp(n) 8 sum comm(u, n) + sum
  comm(n, v)"; the "8" is a garbled "+" (the text explains the cost as computation plus
  the communication with ancestors *and* descendants on the same pe). Edges inside the
  group are never cut and do not count. The target is not known yet when the cost is
  needed, so an edge costs latency + bytes / bandwidth over the cluster's mean link.
  On devices of different speeds (the host beside GPUs, pardnn.graph.op_rates) comp(n)
  is n's time on the slowest device the group may go to: a group the repair might have
  to send to the host is costed as the host would run it, so that the knapsack offloads
  variables and their optimizer updates (much memory, little work) before activations
  and the MatMuls that make them.
- potential at time t: what leaving the device frees there at t:
  * the buffers of the memory profile (pardnn.emulator.memory) the group frees, as
    rows built by pardnn.repair.chains: an input buffer whose last local consumer
    is in the group (the thesis' M_pot, Table 4.2), from when it is complete or when
    the last other reader has finished, until it is freed; then, once that group has
    left, the next reader's part, and so on down the buffer's chain of readers; a
    member's own output while it runs (M_pot's "st(n) <= t < ft(n)"), or its whole
    life when nothing on the device reads it;
  * the group's resident state (variables, optimizer slots, persistent bytes) for the
    whole step. Table 4.2 has no term for it, yet moving a variable frees exactly that,
    and it is what makes most large models fit;
  * minus the copy that readers outside the group must then receive of a variable or
    reference member's value, from its producer's finish to the last such reader's:
    without it, moving a variable away from its readers looks like a saving of its
    whole size while the emulator then holds a copy of it for most of the step.
  For a group of one NORMAL node whose inputs have no other reader this is M_pot(n, t).
- need on a target device: the resident state for the whole step, the members' own
  outputs for their lifetime, and a copy of each input tensor produced elsewhere for
  the interval the group's buffers above hold it. Inputs the group reads but does not
  free last are left out: an approximation the next emulation corrects.

Intervals are kept as ranges of positions on a time grid (segment i holds from
grid[i] to grid[i + 1]): on the source, the segments that start inside the interval,
so the bytes freed at a segment's start are exactly the potential there.
"""

from __future__ import annotations

import numpy as np

from pardnn.base.compiled import INTERPRETED_BELOW, kernel
from pardnn.graph.node_memory import resident_bytes
from pardnn.repair.chains import Buffers, buffer_rows
from pardnn.graph import NORMAL


def distinct(sorted_keys) -> np.ndarray:
    """Mask of the first of each run of equal keys in a sorted array. (np.unique hashes
    in numpy 2 and is two orders of magnitude slower than a sort on large int arrays.)"""
    first = np.ones(len(sorted_keys), bool)
    first[1:] = sorted_keys[1:] != sorted_keys[:-1]
    return first


def sum_by_key(keys, values):
    """(distinct keys in increasing order, sum of values per key)."""
    order = np.argsort(keys, kind="stable")
    keys = keys[order]
    starts = np.flatnonzero(distinct(keys))
    if len(starts) == 0:
        return keys, values[:0]
    return keys[starts], np.add.reduceat(values[order], starts)


def _csr_ptr(sorted_keys, n):
    ptr = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(sorted_keys, minlength=n), out=ptr[1:])
    return ptr


class GroupLinks:
    """Per colocation group: compute time, resident bytes and the edges crossing its
    boundary (neighbour node and cost over the mean link). Fixed for a graph and cluster."""

    def __init__(self, graph, cluster, allowed=None):
        ng = graph.num_groups
        latency, bandwidth = cluster.mean_link()
        ecost = (latency + graph.edge_bytes / bandwidth) if cluster.num_devices > 1 \
            else np.zeros(graph.num_edges)
        gs, gd = graph.group[graph.edge_src], graph.group[graph.edge_dst]
        cut = np.flatnonzero(gs != gd)
        owner = np.concatenate([gs[cut], gd[cut]]).astype(np.int64)
        order = np.argsort(owner, kind="stable")
        self.owner = owner[order]
        self.nbr = np.concatenate([graph.edge_dst[cut], graph.edge_src[cut]])[order]
        self.ecost = np.concatenate([ecost[cut], ecost[cut]])[order]
        self.ptr = _csr_ptr(self.owner, ng)
        self.comp = np.bincount(graph.group, graph.comp_us, minlength=ng)
        self.move_comp = self.comp if cluster.uniform else _slowest_comp(graph, cluster, allowed)
        self.resident = np.bincount(graph.group, resident_bytes(graph), minlength=ng).astype(np.int64)
        self.nodes = graph.num_nodes
        self.reads = _state_reads(graph)        # for Footprints

    def move_cost(self, group_dev, node_dev) -> np.ndarray:
        """Eq. 4.5 per group under placement node_dev (see the module docstring); by the
        kernel `_local_costs` on graphs of INTERPRETED_BELOW nodes or more, by numpy's
        bincount on smaller ones (the same sums, in the same order)."""
        if self.nodes < INTERPRETED_BELOW:
            local = node_dev[self.nbr] == group_dev[self.owner]
            return self.move_comp + np.bincount(self.owner[local], self.ecost[local], minlength=len(self.comp))
        return self.move_comp + _local_costs.compiled(self.ptr, self.nbr, self.ecost, group_dev, node_dev)


def _slowest_comp(graph, cluster, allowed=None) -> np.ndarray:
    """Per group, its compute time on the slowest device it may go to (`allowed`,
    groups x devices; every device when None), each class of op at that device's rate."""
    ng, scale = graph.num_groups, cluster.time_scale
    by_class = np.stack([np.bincount(graph.group, np.where(graph.rate_class == c, graph.comp_us, 0.0),
                                     minlength=ng) for c in range(scale.shape[0])], axis=1)
    times = by_class @ scale                                    # groups x devices
    if allowed is not None:
        times = np.where(allowed, times, 0.0)
    return times.max(axis=1)


@kernel
def _local_costs(ptr, nbr, ecost, group_dev, node_dev):
    """Per group, the summed cost of its boundary edges to nodes on its own device,
    in the order of its CSR entries (the order bincount adds them in)."""
    total = np.zeros(ptr.shape[0] - 1)
    for g in range(ptr.shape[0] - 1):
        for i in range(ptr[g], ptr[g + 1]):
            if node_dev[nbr[i]] == group_dev[g]:
                total[g] += ecost[i]
    return total


class Footprints:
    """Per group, from one emulation: the intervals of memory it frees on its device
    (signed: a copy that must come back costs bytes) and of the buffers it needs on
    another (see the module docstring), each in CSR by group. With `on` (bool per
    device), only the groups on those devices have rows: the repair moves groups off
    the devices that overflow, and reads nothing of the others' (their rows would be
    the same, so the round's moves are too). `reads`: the graph's reads of variables
    and references (`_state_reads`), when known (GroupLinks keeps them)."""

    def __init__(self, graph, profile, k, grid, on=None, reads=None):
        on = np.ones(k, bool) if on is None else on
        returned = _returned_rows(graph, profile, on, reads)
        rows = [buffer_rows(graph, profile, k, on),
                (*returned, np.ones(len(returned[0]), bool), np.full(len(returned[0]), -1, np.int64))]
        cols = [np.concatenate(col) for col in zip(*rows)]
        if graph.num_nodes < INTERPRETED_BELOW:
            grouped = _by_group_numpy(*cols, graph.num_groups)
        else:
            grouped = _by_group.compiled(*cols, graph.num_groups)
        # `active`: rows whose group's leaving frees them now; `next`, `prev`: down and up their chains
        self.group, self.dev, lo, hi, self.bytes, self.active, self.next, self.prev, self.ptr = grouped
        self.i0, self.i1 = (grid_positions(grid, t, graph.num_nodes) for t in (lo, hi))
        self._index_needed(graph, profile, on)

    def _index_needed(self, graph, profile, on):
        """The rows of the buffers each group would need on another device, in CSR by
        group (`need_ptr`): start, end, bytes, producer (-1 for a member's own output,
        else the node whose output it is: no copy is needed where that node already
        runs), buffer, and when it is complete (pardnn.repair.move reads them). Graphs
        of INTERPRETED_BELOW nodes or more run the kernel `_needed_rows`, smaller ones
        numpy (`_needed_by_numpy`): the same rows."""
        p, group = profile, graph.group.astype(np.int64)
        if graph.num_nodes < INTERPRETED_BELOW:
            rows = _needed_by_numpy(group, graph.num_groups, p, on)
        else:
            rows = _needed_rows.compiled(group, graph.num_groups, on, Buffers.of(p))
        (self.need_ptr, self.need_buf, self.need_lo, self.need_ready, self.need_hi, self.need_bytes,
         self.need_prod) = rows

    def rows(self, g: int) -> range:
        """Ids of the rows group g's leaving may free (see `active` and `next`)."""
        return range(self.ptr[g], self.ptr[g + 1])

    def on_device(self, d: int) -> np.ndarray:
        """Ids of the rows on device d."""
        return np.flatnonzero(self.dev == d)


def _by_group_numpy(g, dev, lo, hi, nbytes, active, nxt, num_groups):
    """The rows (group, device, start, end, bytes, active, next) in CSR by group, in
    their order within a group (a stable sort), with `next` renumbered, the row each
    is next of (`prev`, -1 if none) and the CSR pointers."""
    order = np.argsort(g, kind="stable")
    where = np.empty(len(order), np.int64)
    where[order] = np.arange(len(order))
    nxt = np.where(nxt[order] >= 0, where[np.maximum(nxt[order], 0)], -1)
    prev = np.full(len(order), -1, np.int64)
    prev[nxt[nxt >= 0]] = np.flatnonzero(nxt >= 0)
    return (g[order], dev[order], lo[order], hi[order], nbytes[order], active[order], nxt, prev,
            _csr_ptr(g[order], num_groups))


@kernel
def _by_group(g, dev, lo, hi, nbytes, active, nxt, num_groups):
    """`_by_group_numpy` by a counting sort on the group."""
    n = g.shape[0]
    ptr = np.zeros(num_groups + 1, np.int64)
    for i in range(n):
        ptr[g[i] + 1] += 1
    for x in range(num_groups):
        ptr[x + 1] += ptr[x]
    fill, where = ptr[:num_groups].copy(), np.empty(n, np.int64)
    for i in range(n):
        where[i] = fill[g[i]]
        fill[g[i]] += 1
    group, device, start, end, held = (np.empty(n, np.int64), np.empty(n, np.int64), np.empty(n), np.empty(n),
                                       np.empty(n, np.int64))
    live, down, up = np.empty(n, np.bool_), np.empty(n, np.int64), np.full(n, -1, np.int64)
    for i in range(n):
        r = where[i]
        group[r], device[r], start[r], end[r] = g[i], dev[i], lo[i], hi[i]
        held[r], live[r] = nbytes[i], active[i]
        down[r] = where[nxt[i]] if nxt[i] >= 0 else -1
    for r in range(n):
        if down[r] >= 0:
            up[down[r]] = r
    return group, device, start, end, held, live, down, up, ptr


def grid_positions(grid, values, nodes) -> np.ndarray:
    """np.searchsorted(grid, values) (side "left") on a sorted grid of distinct times;
    by the kernel `_bucketed_search` on graphs of INTERPRETED_BELOW `nodes` or more."""
    if nodes < INTERPRETED_BELOW:
        return np.searchsorted(grid, values)
    return _bucketed_search.compiled(grid, values)


@kernel
def _bucketed_search(grid, values):
    """np.searchsorted(grid, values) by a table of len(grid) equal spans of time over
    the grid: each value is searched for only among the grid points in its span. A
    point in an earlier span is earlier than the value, one in a later span later, as
    the span of a time never decreases with it, rounding included; so the answer is
    numpy's, and the searches touch a few points each instead of the whole grid. A grid
    whose span per point is not a positive finite double (one point, or a few ulps
    wide) is searched whole."""
    n, out = grid.shape[0], np.empty(values.shape[0], np.int64)
    width = (grid[n - 1] - grid[0]) / n if n > 1 else 0.0
    if not 0.0 < width < np.inf:
        for j in range(values.shape[0]):
            out[j] = np.searchsorted(grid, values[j])
        return out
    first = grid[0]
    table, i = np.empty(n + 2, np.int64), 0        # table[s]: the first point in span s or later
    for s in range(n + 2):
        while i < n and min(int((grid[i] - first) / width), n) < s:
            i += 1
        table[s] = i
    for j in range(values.shape[0]):
        x = values[j]
        if not x > first:
            out[j] = 0
        elif x > grid[n - 1]:
            out[j] = n
        else:
            s = min(int((x - first) / width), n)
            out[j] = table[s] + np.searchsorted(grid[table[s]:table[s + 1]], x)
    return out


def _needed_by_numpy(group, num_groups, p, on):
    """`Footprints._index_needed`'s rows by numpy: the (group, buffer) pairs of the
    buffers on devices `on` (each group's members' own outputs, and the buffers a member
    frees last), sorted and made distinct, with flags `produced` (a member wrote it)
    and `tail` (a member reads it last); every pair has one of them."""
    nbuf = len(p.buf_bytes)
    here = on[p.buf_device]
    own = here & (p.buf_device == p.node_device[p.buf_node])     # received copies live elsewhere
    has_owner = here & (p.buf_owner >= 0)
    owner_group = np.where(has_owner, group[np.maximum(p.buf_owner, 0)], -1)
    buf = np.arange(nbuf, dtype=np.int64)
    key = np.sort(np.concatenate([group[p.buf_node[own]] * nbuf + buf[own],
                                  owner_group[has_owner] * nbuf + buf[has_owner]]))
    key = key[distinct(key)]
    g, b = key // nbuf, key % nbuf
    produced = own[b] & (group[p.buf_node[b]] == g)
    return (_csr_ptr(g, num_groups), b, np.where(produced, p.buf_alloc[b], p.buf_ready[b]),
            p.buf_ready[b], p.buf_free[b], p.buf_bytes[b], np.where(produced, -1, p.buf_node[b]))


@kernel
def _needed_rows(group, num_groups, on, buffers):
    """`_needed_by_numpy`'s rows by a counting sort on the group: the Buffers in
    increasing order, each under its producer's group (a member's own output) and its
    last local reader's group (one row if the two are the same group)."""
    buf_node, buf_device, buf_owner, alloc, ready, free, nbytes, node_device = buffers
    nbuf = buf_device.shape[0]
    ptr = np.zeros(num_groups + 1, np.int64)
    made, read = np.full(nbuf, -1, np.int64), np.full(nbuf, -1, np.int64)
    for b in range(nbuf):
        if on[buf_device[b]]:
            if buf_device[b] == node_device[buf_node[b]]:
                made[b] = group[buf_node[b]]
                ptr[made[b] + 1] += 1
            if buf_owner[b] >= 0 and group[buf_owner[b]] != made[b]:
                read[b] = group[buf_owner[b]]
                ptr[read[b] + 1] += 1
    for g in range(num_groups):
        ptr[g + 1] += ptr[g]
    size = ptr[num_groups]
    fill = ptr[:num_groups].copy()
    buf, lo, done, hi, held, prod = (np.empty(size, np.int64), np.empty(size), np.empty(size), np.empty(size),
                                   np.empty(size, np.int64), np.empty(size, np.int64))
    for b in range(nbuf):
        for g in (made[b], read[b]):
            if g >= 0:
                r = fill[g]
                fill[g] += 1
                buf[r], done[r], hi[r], held[r] = b, ready[b], free[b], nbytes[b]
                lo[r], prod[r] = (alloc[b], -1) if g == made[b] else (ready[b], buf_node[b])
    return ptr, buf, lo, done, hi, held, prod


def _state_reads(graph) -> np.ndarray:
    """The data edges from a variable or reference node to a node outside its group."""
    u, v = graph.edge_src, graph.edge_dst
    return np.flatnonzero((graph.edge_slot >= 0) & (graph.kind[u] != NORMAL) & (graph.group[u] != graph.group[v]))


def _returned_rows(graph, profile, on, reads=None):
    """(group, device, start, end, -bytes): a variable or reference member read by a
    node outside the group on the same device holds no buffer there (the variable is
    resident); once the group leaves, that node needs a received copy, from the
    producer's finish to the last such reader's finish. Only readers on devices `on`;
    `reads`, `_state_reads(graph)` if known."""
    p = profile
    u, v = graph.edge_src, graph.edge_dst
    m = _state_reads(graph) if reads is None else reads
    m = m[on[p.node_device[v[m]]] & (p.node_device[u[m]] == p.node_device[v[m]])]
    tensor = u[m].astype(np.int64) * (int(graph.edge_slot.max(initial=0)) + 1) + graph.edge_slot[m]
    order = np.argsort(tensor, kind="stable")
    starts = distinct(tensor[order])
    first, inv = order[starts], np.empty(len(m), np.int64)
    inv[order] = np.cumsum(starts) - 1
    hi = np.full(len(first), -np.inf)
    np.maximum.at(hi, inv, p.node_running[1][v[m]])
    nbytes = np.zeros(len(first), np.int64)
    np.maximum.at(nbytes, inv, graph.edge_bytes[m])
    src = u[m][first]
    return (graph.group[src].astype(np.int64), p.node_device[src], p.node_running[1][src], hi, -nbytes)

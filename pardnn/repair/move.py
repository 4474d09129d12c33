"""Moving colocation groups off an overflowing device in a repair round (thesis
§4.1.2: a node moves "only to a device whose emulated memory can absorb it"): pop the
knapsack's candidates (pardnn.repair.knapsack), choose where each goes, and update the
round's memory timelines for the move. Done for every move of a round, tens of
thousands per round, so one kernel per knapsack (pardnn.base.compiled): a call into
numba per move cost as much as the move.

Where it goes (pardnn.repair.repair_round's module docstring): the first device, in
order of preference, that absorbs it. The order: the devices the group's pins allow,
other than its own, the fastest first (`tier`, pardnn.hardware.cluster: the host
beside GPUs only when no GPU absorbs the group; on alike devices every tier is 0), then
by the communication time between the group and each device's nodes (most first;
summed edge by edge in edge order, as numpy's bincount sums), then the device's
compute time, then its index.

What the group adds on device e: its resident state over the whole step, and the
buffers it would need there (pardnn.repair.footprint's `need_*` rows): an input whose
producer already runs on e needs no copy; a member's output that an earlier move of
this round already copied to e (for a consumer that went there first; `copied`) is
added only while it is written, up to `ready`; an empty interval adds nothing.

On the repair's grid an interval [lo, hi) holds segments j0..j1-1: j0 the segment that
contains lo, j1 the first segment starting at or after hi, and at least one segment.
The device absorbs the group when, on every segment the group adds bytes to, its level
there (pardnn.repair.rangemax) plus those bytes plus the group's resident state stays
within the capacity, and its highest level plus the resident state does too. Levels
are whole bytes, so the answer is exact.

The move then frees the group's active footprint rows on its device, passing each
buffer down its chain of readers (pardnn.repair.chains: a row whose group has left
already is freed at once), adds the buffers it needs and its resident state on the
target, marks the copies it made, and moves its compute time and its nodes.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from pardnn.base.compiled import kernel


class Neighbours(NamedTuple):
    """Each group's cut edges, CSR by group, and its compute time
    (pardnn.repair.footprint.GroupLinks)."""

    ptr: np.ndarray         # int64, groups + 1
    nbr: np.ndarray         # int64: the node at the other end
    ecost: np.ndarray       # float64: the edge's transfer time
    comp: np.ndarray        # float64 per group


class Timelines(NamedTuple):
    """The devices' memory levels on the round's grid (pardnn.repair.rangemax.RangeMax)."""

    vals: np.ndarray        # int64, devices x positions
    lazy: np.ndarray        # int64, devices x blocks: added to a whole block
    bmax: np.ndarray        # int64, devices x blocks: each block's highest value
    n: int                  # positions in use
    block: int              # positions per block
    times: np.ndarray       # float64: each position's time


class Needs(NamedTuple):
    """The buffers each group would need on another device, CSR by group
    (pardnn.repair.footprint's `need_*` rows)."""

    ptr: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    nbytes: np.ndarray
    prod: np.ndarray        # the producer whose output is copied, or -1
    buf: np.ndarray         # the buffer copied
    ready: np.ndarray       # when the copy is complete


class Rows(NamedTuple):
    """The footprint rows of the round, CSR by group (pardnn.repair.footprint.Footprints)."""

    ptr: np.ndarray
    i0: np.ndarray          # first grid position
    i1: np.ndarray          # past the last
    nbytes: np.ndarray
    active: np.ndarray      # bool: held on its device now
    next: np.ndarray        # the next reader's row in the buffer's chain, or -1
    group: np.ndarray


class Round(NamedTuple):
    """What the round's moves change, and the groups' members."""

    node_dev: np.ndarray    # int64 per node
    busy: np.ndarray        # float64 per device: compute time
    cap: np.ndarray         # int64 per device: capacity
    copied: np.ndarray      # bool, devices x buffers: copied there by a move of this round
    gone: np.ndarray        # bool per group: moved this round
    group_ptr: np.ndarray
    group_nodes: np.ndarray
    tier: np.ndarray        # int64 per device: 0 for the fastest (pardnn.hardware.cluster's `tiers`)


@kernel
def cover(d, overflow, cand, pot, cost, by_ratio, by_pot, taken, allowed, resident, moves,
          links, timelines, needs, rows, state):
    """One knapsack of device d's overflow (pardnn.repair.knapsack's rule, as its
    TwoHeaps pops): candidates j, groups `cand[j]` freeing `pot[j]` bytes at move cost
    `cost[j]`, in the two orders `by_ratio` and `by_pot` (knapsack.orders), popped
    until `overflow` bytes are covered or none is left. Each popped group is marked in
    `taken` and moved off d to the first device that absorbs it (module docstring;
    `allowed`: devices per group, `resident`: bytes per group held all step), updating
    the Timelines, the Round's `copied`, `gone`, `busy` and `node_dev`, and the Rows'
    `active`; a group no device can take changes nothing else. (overflow left, moves):
    the first `moves` rows of `moves` are each move's (group, device), in order."""
    ptr, nbr, ecost, comp = links
    vals, lazy, bmax, n, block, times = timelines
    need_ptr, need_lo, need_hi, need_bytes, need_prod, need_buf, need_ready = needs
    row_ptr, row_i0, row_i1, row_bytes, row_active, row_next, row_group = rows
    node_dev, busy, cap, copied, gone, group_ptr, group_nodes, tier = state
    k = cap.shape[0]

    def row_max(e, lo, hi):
        """The highest level of device e over positions lo..hi-1 (lo < hi)."""
        bl, br = lo // block, (hi - 1) // block
        top = vals[e, lo:min(hi, (bl + 1) * block)].max() + lazy[e, bl]
        if br > bl:
            top = max(top, vals[e, br * block:hi].max() + lazy[e, br])
        for q in range(bl + 1, br):
            top = max(top, bmax[e, q] + lazy[e, q])
        return top

    def add(e, lo, hi, x):
        """Add x to device e's levels over positions lo..hi-1 (clipped to 0..n)."""
        lo, hi = max(lo, 0), min(hi, n)
        if lo >= hi:
            return
        bl, br = lo // block, (hi - 1) // block
        vals[e, lo:min(hi, (bl + 1) * block)] += x
        bmax[e, bl] = vals[e, bl * block:(bl + 1) * block].max()
        if br > bl:
            lazy[e, bl + 1:br] += x
            vals[e, br * block:hi] += x
            bmax[e, br] = vals[e, br * block:(br + 1) * block].max()

    def first_at_or_after(t, strict):
        """The first grid position whose time is > t (strict) or >= t."""
        a, b = 0, times.shape[0]
        while a < b:
            mid = (a + b) // 2
            if times[mid] > t or (not strict and times[mid] == t):
                b = mid
            else:
                a = mid + 1
        return a

    def preference(g):
        """(options, count): the devices g may go to, best first."""
        talk = np.zeros(k)
        for i in range(ptr[g], ptr[g + 1]):
            talk[node_dev[nbr[i]]] += ecost[i]
        options = np.empty(k, np.int64)
        m = 0
        for e in range(k):
            if allowed[g, e] and e != d:
                j = m                               # insertion by (tier, -talk, busy, index)
                while j > 0 and (tier[e] < tier[options[j - 1]] or (tier[e] == tier[options[j - 1]] and (
                        talk[e] > talk[options[j - 1]]
                        or (talk[e] == talk[options[j - 1]] and busy[e] < busy[options[j - 1]])))):
                    options[j] = options[j - 1]
                    j -= 1
                options[j] = e
                m += 1
        return options, m

    def buffers_on(g, e):
        """(rows, j0, j1): the need rows g would add on device e (offsets from its first)
        and the grid segments each covers."""
        lo_g, count = need_ptr[g], need_ptr[g + 1] - need_ptr[g]
        keep, end = np.zeros(count, np.bool_), np.empty(count)
        for r in range(lo_g, lo_g + count):
            copy = need_prod[r] >= 0
            end[r - lo_g] = need_ready[r] if not copy and copied[e, need_buf[r]] else need_hi[r]
            keep[r - lo_g] = (not copy or node_dev[need_prod[r]] != e) and end[r - lo_g] > need_lo[r]
        rows = np.flatnonzero(keep)
        j0, j1 = np.empty(rows.shape[0], np.int64), np.empty(rows.shape[0], np.int64)
        for s in range(rows.shape[0]):
            j0[s] = max(first_at_or_after(need_lo[lo_g + rows[s]], True) - 1, 0)
            j1[s] = max(first_at_or_after(end[rows[s]], False), j0[s] + 1)
        return rows, j0, j1

    def absorbs(g, e, rows, j0, j1):
        """Whether device e stays within its capacity on every segment g adds bytes to."""
        cuts = np.unique(np.concatenate((j0, j1)))
        step = np.zeros(cuts.shape[0], np.int64)
        for s in range(rows.shape[0]):
            step[np.searchsorted(cuts, j0[s])] += need_bytes[need_ptr[g] + rows[s]]
            step[np.searchsorted(cuts, j1[s])] -= need_bytes[need_ptr[g] + rows[s]]
        level = 0
        for i in range(cuts.shape[0] - 1):
            level += step[i]
            a, b = max(cuts[i], 0), min(cuts[i + 1], n)
            if level > 0 and a < b and row_max(e, a, b) + level + resident[g] > cap[e]:
                return False
        return True

    def move(g, e, rows, j0, j1):
        """g's move from d to e, on the timelines and the round's state."""
        gone[g] = True
        for r in range(row_ptr[g], row_ptr[g + 1]):
            if row_active[r]:
                h = r
                while True:                         # free it, and pass the buffer down its chain
                    add(d, row_i0[h], row_i1[h], -row_bytes[h])
                    h = row_next[h]
                    if h < 0 or row_active[h]:
                        break
                    row_active[h] = True
                    if not gone[row_group[h]]:
                        break
        for s in range(rows.shape[0]):
            r = need_ptr[g] + rows[s]
            add(e, j0[s], j1[s], need_bytes[r])
            if need_prod[r] >= 0:
                copied[e, need_buf[r]] = True
        add(d, 0, n, -resident[g])
        add(e, 0, n, resident[g])
        busy[d] -= comp[g]
        busy[e] += comp[g]
        for i in range(group_ptr[g], group_ptr[g + 1]):
            node_dev[group_nodes[i]] = e

    def move_group(g):
        """Move group g off d to the first device that absorbs it: that device, or -1."""
        options, m = preference(g)
        for o in range(m):
            e = options[o]
            if resident[g] and row_max(e, 0, n) + resident[g] > cap[e]:
                continue
            rows, j0, j1 = buffers_on(g, e)
            if absorbs(g, e, rows, j0, j1):
                move(g, e, rows, j0, j1)
                return e
        return -1

    size = cand.shape[0]
    left = np.ones(size, np.bool_)
    heap_cost, heap_j = np.empty(size), np.empty(size, np.int64)   # the covering heap, by (cost, j)

    def before(a, b):
        """Whether heap entry a comes out before entry b."""
        return heap_cost[a] < heap_cost[b] or (heap_cost[a] == heap_cost[b] and heap_j[a] < heap_j[b])

    def swap(a, b):
        heap_cost[a], heap_cost[b] = heap_cost[b], heap_cost[a]
        heap_j[a], heap_j[b] = heap_j[b], heap_j[a]

    def push(count, j):
        """Add candidate j to the covering heap of `count` entries; the new count."""
        heap_cost[count], heap_j[count] = cost[j], j
        a = count
        while a > 0 and before(a, (a - 1) // 2):
            swap(a, (a - 1) // 2)
            a = (a - 1) // 2
        return count + 1

    def pop_top(count):
        """Drop the covering heap's top; the new count."""
        count -= 1
        heap_cost[0], heap_j[0] = heap_cost[count], heap_j[count]
        a = 0
        while True:
            least, c = a, 2 * a + 1
            if c < count and before(c, least):
                least = c
            if c + 1 < count and before(c + 1, least):
                least = c + 1
            if least == a:
                return count
            swap(a, least)
            a = least

    head = joined = covering = done = 0
    while overflow > 0:
        while head < size and not left[by_ratio[head]]:
            head += 1
        if head == size:
            break
        while joined < size and pot[by_pot[joined]] >= overflow:    # they now cover it: join
            if left[by_pot[joined]]:
                covering = push(covering, by_pot[joined])
            joined += 1
        while covering > 0 and not left[heap_j[0]]:
            covering = pop_top(covering)
        best = by_ratio[head]
        if covering > 0 and heap_cost[0] <= cost[best]:
            best = heap_j[0]
        left[best] = False
        g = cand[best]
        taken[g] = True
        e = move_group(g)
        if e >= 0:
            moves[done, 0], moves[done, 1] = g, e
            done += 1
            overflow -= pot[best]
    return overflow, done

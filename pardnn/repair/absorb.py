"""Where a moved group goes (thesis §4.1.2: a node moves "only to a device whose emulated
memory can absorb it"): the first device, in the repair's order of preference, whose
timeline can take what the group would add there. Asked for every move of a repair
round, tens of thousands per round, so a kernel (pardnn.compiled).

The order (pardnn.repair.repair_round's module docstring): the devices the group's pins
allow, other than its own, by the communication time between the group and each
device's nodes (most first; summed edge by edge in edge order, as numpy's bincount
sums), then the device's compute time, then its index.

What the group adds on device e: its resident state over the whole step, and the
buffers it would need there (pardnn.repair.footprint's `need_*` rows): an input whose
producer already runs on e needs no copy; a member's output that an earlier move of
this round already copied to e (for a consumer that went there first; `copied`) is
added only while it is written, up to `ready`; an empty interval adds nothing.

On the repair's grid (pardnn.repair.repair_round) an interval [lo, hi) holds segments
j0..j1-1: j0 the segment that contains lo, j1 the first segment starting at or after hi,
and at least one segment. The device absorbs the group when, on every segment the
group adds bytes to, its level there (pardnn.repair.rangemax's arrays: a position's
`vals` plus its block's `lazy`, a whole block's highest `bmax` plus `lazy`) plus those bytes plus the group's resident state stays within
the capacity, and its highest level plus the resident state does too. Levels are whole
bytes, so the answer is exact.
"""

from __future__ import annotations

import numpy as np

from pardnn.compiled import kernel


@kernel
def first_absorbing(g, d, allowed, ptr, nbr, ecost, node_dev, busy, resident, cap,
                    vals, lazy, bmax, n, block, times,
                    need_ptr, need_lo, need_hi, need_bytes, need_prod, need_buf, need_ready, copied):
    """(device, j0, j1, bytes, copied buffers) for group g leaving device d: the first
    device that absorbs it (see the module docstring), the grid segments and bytes of
    each buffer it adds there, and the buffers that are copies; device -1 when none
    can. `vals`, `lazy`, `bmax`: RangeMax's arrays, one row per device."""
    k = cap.shape[0]
    talk = np.zeros(k)
    for i in range(ptr[g], ptr[g + 1]):
        talk[node_dev[nbr[i]]] += ecost[i]
    options = np.empty(k, np.int64)
    m = 0
    for e in range(k):
        if allowed[e] and e != d:
            j = m                                   # insertion by (-talk, busy, index)
            while j > 0 and (talk[e] > talk[options[j - 1]]
                             or (talk[e] == talk[options[j - 1]] and busy[e] < busy[options[j - 1]])):
                options[j] = options[j - 1]
                j -= 1
            options[j] = e
            m += 1

    def row_max(e, lo, hi):
        """The highest level of device e over segments lo..hi-1: two partial blocks
        read entry by entry, the blocks between by their maxima."""
        bl, br = lo // block, (hi - 1) // block
        top = vals[e, lo:min(hi, (bl + 1) * block)].max() + lazy[e, bl]
        if br > bl:
            top = max(top, vals[e, br * block:hi].max() + lazy[e, br])
        for q in range(bl + 1, br):
            top = max(top, bmax[e, q] + lazy[e, q])
        return top

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

    lo_g, hi_g = need_ptr[g], need_ptr[g + 1]
    for o in range(m):
        e = options[o]
        if resident and row_max(e, 0, n) + resident > cap[e]:
            continue
        keep = np.zeros(hi_g - lo_g, np.bool_)
        end = np.empty(hi_g - lo_g)
        for r in range(lo_g, hi_g):
            copy = need_prod[r] >= 0
            end[r - lo_g] = need_ready[r] if not copy and copied[e, need_buf[r]] else need_hi[r]
            keep[r - lo_g] = (not copy or node_dev[need_prod[r]] != e) and end[r - lo_g] > need_lo[r]
        rows = np.flatnonzero(keep)
        j0, j1 = np.empty(rows.shape[0], np.int64), np.empty(rows.shape[0], np.int64)
        nbytes = np.empty(rows.shape[0], np.int64)
        for s in range(rows.shape[0]):
            r = lo_g + rows[s]
            j0[s] = max(first_at_or_after(need_lo[r], True) - 1, 0)
            j1[s] = max(first_at_or_after(end[rows[s]], False), j0[s] + 1)
            nbytes[s] = need_bytes[r]
        cuts = np.unique(np.concatenate((j0, j1)))
        step = np.zeros(cuts.shape[0], np.int64)
        for s in range(rows.shape[0]):
            step[np.searchsorted(cuts, j0[s])] += nbytes[s]
            step[np.searchsorted(cuts, j1[s])] -= nbytes[s]
        level, fits = 0, True
        for i in range(cuts.shape[0] - 1):
            level += step[i]
            a, b = max(cuts[i], 0), min(cuts[i + 1], n)
            if level > 0 and a < b and row_max(e, a, b) + level + resident > cap[e]:
                fits = False
                break
        if fits:
            copies = np.zeros(rows.shape[0], np.bool_)
            for s in range(rows.shape[0]):
                copies[s] = need_prod[lo_g + rows[s]] >= 0
            return e, j0, j1, nbytes, need_buf[lo_g + rows[copies]]
    empty = np.zeros(0, np.int64)
    return -1, empty, empty, empty, empty

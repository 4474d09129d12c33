"""Whether a device can absorb a moved group's buffers (thesis §4.1.2: a node moves "only
to a device whose emulated memory can absorb it"), asked thousands of times per repair
round, so a kernel (pardnn.compiled).

The buffers are intervals of time; on the repair's grid (pardnn.repair.repair_round) an
interval [lo, hi) holds segments j0..j1-1: j0 the segment that contains lo, j1 the first
segment starting at or after hi, and at least one segment. The device absorbs them when,
on every segment the group adds bytes to, its level there (pardnn.repair.rangemax's
arrays, read as RangeMax.max reads them) plus those bytes plus the group's resident
state stays within the capacity. Levels are whole bytes, so the answer is exact.
"""

from __future__ import annotations

import numpy as np

from pardnn.compiled import kernel


@kernel
def absorbs(vals, lazy, bmax, n, block, times, lo, hi, nbytes, resident, cap):
    """(absorbed, j0, j1) for intervals lo/hi of nbytes each (see the module docstring)."""
    m = lo.shape[0]
    j0, j1 = np.empty(m, np.int64), np.empty(m, np.int64)
    for r in range(m):
        a, b = 0, times.shape[0]                    # first time > lo[r], less one
        while a < b:
            mid = (a + b) // 2
            if times[mid] > lo[r]:
                b = mid
            else:
                a = mid + 1
        j0[r] = max(a - 1, 0)
        a, b = 0, times.shape[0]                    # first time >= hi[r]
        while a < b:
            mid = (a + b) // 2
            if times[mid] >= hi[r]:
                b = mid
            else:
                a = mid + 1
        j1[r] = max(a, j0[r] + 1)
    cuts = np.unique(np.concatenate((j0, j1)))
    step = np.zeros(cuts.shape[0], np.int64)
    for r in range(m):
        step[np.searchsorted(cuts, j0[r])] += nbytes[r]
        step[np.searchsorted(cuts, j1[r])] -= nbytes[r]
    level = 0
    for i in range(cuts.shape[0] - 1):
        level += step[i]
        if level <= 0:
            continue
        s, e = max(cuts[i], 0), min(cuts[i + 1], n)
        if s >= e:
            continue
        bl, br = s // block, (e - 1) // block
        top = vals[s:min(e, (bl + 1) * block)].max() + lazy[bl]
        if br > bl:
            top = max(top, vals[br * block:e].max() + lazy[br])
        for q in range(bl + 1, br):
            top = max(top, bmax[q] + lazy[q])
        if top + level + resident > cap:
            return False, j0, j1
    return True, j0, j1

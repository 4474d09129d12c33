"""A device's memory timeline that the overflow repair edits move by move: range add,
range max and the first position of the maximum, each in O(sqrt n) numpy work.

Why: the repair (pardnn.repair.overflow_repair) moves thousands of colocation groups per
round between two emulations, and each move changes a device's memory over long
stretches of the step (an activation lives from the forward to the backward pass).
Updating the level array slice by slice would cost O(n) per move; square-root
decomposition keeps a lazy offset and the maximum per block of `BLOCK` entries, so
an update or a query touches at most two partial blocks plus one slice of the block
arrays. A segment tree would be O(log n) but needs a Python loop per level; the
blocks stay inside numpy calls.
"""

from __future__ import annotations

import numpy as np

BLOCK = 256
_PAD = np.iinfo(np.int64).min // 4      # below any level, and safe to add bytes to


class RangeMax:
    """Integer levels over positions 0..n-1 with range add and range max."""

    def __init__(self, levels):
        levels = np.asarray(levels, np.int64)
        self.n = len(levels)
        nb = max(-(-self.n // BLOCK), 1)
        self.vals = np.full(nb * BLOCK, _PAD, np.int64)
        self.vals[:self.n] = levels
        self.lazy = np.zeros(nb, np.int64)
        self.bmax = self.vals.reshape(nb, BLOCK).max(axis=1)

    def _fix(self, b):
        self.bmax[b] = self.vals[b * BLOCK:(b + 1) * BLOCK].max()

    def add(self, lo: int, hi: int, x: int) -> None:
        """Add x to positions lo..hi-1 (nothing when the range is empty)."""
        lo, hi = max(lo, 0), min(hi, self.n)
        if lo >= hi:
            return
        bl, br = lo // BLOCK, (hi - 1) // BLOCK
        if bl == br:
            self.vals[lo:hi] += x
            self._fix(bl)
            return
        self.vals[lo:(bl + 1) * BLOCK] += x
        self._fix(bl)
        self.lazy[bl + 1:br] += x
        self.vals[br * BLOCK:hi] += x
        self._fix(br)

    def max(self, lo: int = 0, hi: int | None = None) -> int:
        """Largest level over positions lo..hi-1 (the whole range by default)."""
        hi = self.n if hi is None else min(hi, self.n)
        lo = max(lo, 0)
        if lo >= hi:
            return int(_PAD)
        bl, br = lo // BLOCK, (hi - 1) // BLOCK
        if bl == br:
            return int(self.vals[lo:hi].max() + self.lazy[bl])
        best = max(self.vals[lo:(bl + 1) * BLOCK].max() + self.lazy[bl],
                   self.vals[br * BLOCK:hi].max() + self.lazy[br])
        if br > bl + 1:
            best = max(best, (self.bmax[bl + 1:br] + self.lazy[bl + 1:br]).max())
        return int(best)

    def argmax(self) -> tuple:
        """(first position of the largest level, that level)."""
        tops = self.bmax + self.lazy
        b = int(np.argmax(tops))
        i = b * BLOCK + int(np.argmax(self.vals[b * BLOCK:(b + 1) * BLOCK]))
        return i, int(tops[b])

    def levels(self) -> np.ndarray:
        """The current levels as a plain array (for tests and checks)."""
        return self.vals[:self.n] + np.repeat(self.lazy, BLOCK)[:self.n]

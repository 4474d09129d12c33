"""A device's memory timeline that the overflow repair edits move by move: range add and
the first position of the maximum, each in O(sqrt n) numpy work; pardnn.repair.absorb
reads range maxima from the same arrays.

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


def blocks(n: int) -> int:
    """How many blocks hold n positions (at least one)."""
    return max(-(-n // BLOCK), 1)


def stacked(levels, rows: int, n: int) -> tuple:
    """(timelines, (vals, lazy, bmax)): a RangeMax for each of the `rows` arrays of n
    levels that `levels` yields, kept in rows of three shared arrays, so that a kernel
    can read every timeline at once."""
    nb = blocks(n)
    store = (np.empty((rows, nb * BLOCK), np.int64), np.empty((rows, nb), np.int64),
             np.empty((rows, nb), np.int64))
    return [RangeMax(row, tuple(a[d] for a in store)) for d, row in enumerate(levels)], store


class RangeMax:
    """Integer levels over positions 0..n-1 with range add and range max."""

    def __init__(self, levels, store=None):
        """`store`, when given, is (vals, lazy, bmax): rows of shared arrays to keep
        the structure in (see `stacked`)."""
        levels = np.asarray(levels, np.int64)
        self.n = len(levels)
        nb = blocks(self.n)
        self.vals, self.lazy, self.bmax = (np.empty(nb * BLOCK, np.int64), np.empty(nb, np.int64),
                                           np.empty(nb, np.int64)) if store is None else store
        self.vals[:] = _PAD
        self.vals[:self.n] = levels
        self.lazy[:] = 0
        self.bmax[:] = self.vals.reshape(nb, BLOCK).max(axis=1)

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

    def argmax(self) -> tuple:
        """(first position of the largest level, that level)."""
        tops = self.bmax + self.lazy
        b = int(np.argmax(tops))
        i = b * BLOCK + int(np.argmax(self.vals[b * BLOCK:(b + 1) * BLOCK]))
        return i, int(tops[b])

    def levels(self) -> np.ndarray:
        """The current levels as a plain array (for tests and checks)."""
        return self.vals[:self.n] + np.repeat(self.lazy, BLOCK)[:self.n]

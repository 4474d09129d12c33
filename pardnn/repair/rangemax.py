"""The devices' memory timelines that the overflow repair edits move by move: range add,
range maximum and the first position of the maximum, each in O(sqrt n) work.

Why: the repair (pardnn.repair.overflow_repair) moves thousands of colocation groups per
round between two emulations, and each move changes a device's memory over long
stretches of the step (an activation lives from the forward to the backward pass).
Updating the level array entry by entry would cost O(n) per move; square-root
decomposition keeps a lazy offset and the maximum per block of `BLOCK` entries, so
an update or a query touches at most two partial blocks plus the block arrays between.
The edits and range maxima run in pardnn.repair.move's kernel; this module holds the
arrays and the queries the repair makes between moves.
"""

from __future__ import annotations

import numpy as np

from pardnn.base.compiled import kernel

BLOCK = 256
_PAD = np.iinfo(np.int64).min // 4      # below any level, and safe to add bytes to


def blocks(n: int) -> int:
    """How many blocks hold n positions (at least one)."""
    return max(-(-n // BLOCK), 1)


class RangeMax:
    """The integer levels of K timelines over positions 0..n-1, one row each, in blocks
    of BLOCK positions: a position's level is its `vals` entry plus its block's `lazy`
    offset, and `bmax` holds each block's highest `vals` entry. Adding x to a range
    adds it entry by entry in the two partial blocks at its ends (then re-takes their
    maxima) and to `lazy` in the blocks between; pardnn.repair.move does that, and reads
    range maxima, in its kernel."""

    def __init__(self, levels, rows: int, n: int):
        """The `rows` timelines of n levels each that `levels` yields, with no offsets."""
        self._allocate(rows, n)
        nb = self.bmax.shape[1]
        for d, row in zip(range(rows), levels):
            self.vals[d, :n] = row
            self.bmax[d] = self.vals[d].reshape(nb, BLOCK).max(axis=1)

    @classmethod
    def of_steps(cls, ptr, levels, starts, n: int):
        """The same as RangeMax(timelines, len(ptr) - 1, n) where timeline d is the step
        function holding levels[j] from position starts[j] (0 for its first, j = ptr[d])
        up to the next one's start (n after its last, j = ptr[d + 1] - 1); filled by the
        kernel `_fill_steps` without building the timelines. Every timeline has a step
        (pardnn.emulator.memory gives each device an event at time 0)."""
        tl = cls.__new__(cls)
        tl._allocate(len(ptr) - 1, n)
        _fill_steps.compiled(ptr, levels, starts, n, tl.vals, tl.bmax)
        return tl

    def _allocate(self, rows, n):
        nb = blocks(n)
        self.n = n
        self.vals = np.empty((rows, nb * BLOCK), np.int64)     # every entry up to n is written after
        self.vals[:, n:] = _PAD
        self.lazy = np.zeros((rows, nb), np.int64)
        self.bmax = np.empty((rows, nb), np.int64)

    def argmax(self, d: int) -> tuple:
        """(first position of row d's largest level, that level)."""
        tops = self.bmax[d] + self.lazy[d]
        b = int(np.argmax(tops))
        i = b * BLOCK + int(np.argmax(self.vals[d, b * BLOCK:(b + 1) * BLOCK]))
        return i, int(tops[b])

    def levels(self, d: int) -> np.ndarray:
        """Row d's current levels as a plain array (for tests and checks)."""
        return self.vals[d, :self.n] + np.repeat(self.lazy[d], BLOCK)[:self.n]


@kernel
def _fill_steps(ptr, levels, starts, n, vals, bmax):
    """`RangeMax.of_steps`'s rows and block maxima, a row at a time."""
    for d in range(ptr.shape[0] - 1):
        for j in range(ptr[d], ptr[d + 1]):
            first = 0 if j == ptr[d] else starts[j]
            end = starts[j + 1] if j + 1 < ptr[d + 1] else n
            vals[d, first:end] = levels[j]
        for b in range(bmax.shape[1]):
            bmax[d, b] = vals[d, b * BLOCK:(b + 1) * BLOCK].max()

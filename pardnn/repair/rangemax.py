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
        nb = blocks(n)
        self.n = n
        self.vals = np.empty((rows, nb * BLOCK), np.int64)     # every entry is written below
        self.vals[:, n:] = _PAD
        self.lazy = np.zeros((rows, nb), np.int64)
        self.bmax = np.empty((rows, nb), np.int64)
        for d, row in zip(range(rows), levels):
            self.vals[d, :n] = row
            self.bmax[d] = self.vals[d].reshape(nb, BLOCK).max(axis=1)

    def argmax(self, d: int) -> tuple:
        """(first position of row d's largest level, that level)."""
        tops = self.bmax[d] + self.lazy[d]
        b = int(np.argmax(tops))
        i = b * BLOCK + int(np.argmax(self.vals[d, b * BLOCK:(b + 1) * BLOCK]))
        return i, int(tops[b])

    def levels(self, d: int) -> np.ndarray:
        """Row d's current levels as a plain array (for tests and checks)."""
        return self.vals[d, :self.n] + np.repeat(self.lazy[d], BLOCK)[:self.n]

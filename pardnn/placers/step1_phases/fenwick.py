"""Work per level on each device, with O(log L) range sums and updates (thesis
§4.1.1, "Mapping": "We use binary-indexed-trees [Fenwick, 1994] ... where the tree
nodes store the weights per level").

One Fenwick tree per device, stored side by side as an (L+1, K) array whose row i
is tree position i of every device. A range query computes the O(log L) positions
of its two prefixes once and answers for all K devices with one gather and one
signed sum. An update touches one device: its positions are collected in Python
and added in one numpy call. The kernels of mapping and cluster swapping
(pardnn.placers.step1_phases.mapping, swapping) update and query `tree` themselves, in the
same order; placement builds the tree here and reads it there, and the methods below
are the numpy definition those kernels are tested against (tests/test_compiled.py,
tests/test_swapping.py, tests/test_fenwick.py).
"""

import numpy as np


class FenwickTree:
    """K Fenwick trees over levels 0..L-1 (float values)."""

    def __init__(self, values):
        """values: (K, L) initial value of each level on each device."""
        values = np.asarray(values, float)
        self.k, self.size = values.shape
        tree = np.zeros((self.size + 1, self.k))
        tree[1:] = values.T
        step = 1
        while step <= self.size:                  # linear-time build, one bit at a time:
            parent = tree[2 * step::2 * step]     # positions 2s, 4s, ... each gets its
            parent += tree[step::2 * step][:len(parent)]    # child 2s - s, 4s - s, ...
            step *= 2
        self.tree = tree                          # (L+1, K): row i is position i
        self._flat = tree.reshape(-1)

    def values(self) -> np.ndarray:
        """(L, K): the current value of every level on every device (the build,
        undone one bit at a time from the top)."""
        tree = self.tree.copy()
        step = 1 << max(self.size.bit_length() - 1, 0)
        while step >= 1:
            child = np.arange(step, self.size + 1, 2 * step)
            parent = child + step
            ok = parent <= self.size
            tree[parent[ok]] -= tree[child[ok]]
            step //= 2
        return tree[1:]

    def add(self, levels, device: int, amounts) -> None:
        """Add amounts[i] to level levels[i] of `device`."""
        size, k = self.size, self.k
        where, what = [], []
        for level, amount in zip(levels, amounts):
            i = int(level) + 1
            while i <= size:
                where.append(i * k + device)
                what.append(amount)
                i += i & -i
        np.add.at(self._flat, where, what)

    def prefix(self, end: int) -> np.ndarray:
        """Per device: the sum of levels 0..end-1."""
        return self.tree[_chain(end)].sum(axis=0)

    def range_sum(self, lo: int, hi: int) -> np.ndarray:
        """Per device: the sum of levels lo..hi-1 (zeros when hi <= lo)."""
        if hi <= lo:
            return np.zeros(self.k)
        up, down = _chain(hi), _chain(lo)
        while up and down and up[-1] == down[-1]:    # shared high bits cancel
            up.pop()
            down.pop()
        # numpy sums, not a BLAS product: the same rounding on every machine
        return self.tree[up].sum(axis=0) - self.tree[down].sum(axis=0)


def _chain(end: int) -> list:
    """Tree positions whose sum is the prefix of length `end`, highest bit last."""
    out = []
    while end > 0:
        out.append(end)
        end &= end - 1
    return out

"""Work per level on each device, with O(log L) range sums and updates (thesis
§4.1.1, "Mapping": "We use binary-indexed-trees [Fenwick, 1994] ... where the tree
nodes store the weights per level").

One Fenwick tree per device, stored side by side as a (K, L+1) array, so that one
query answers for all K devices at once: the O(log L) tree positions of a prefix
are computed once and gathered from every device's row in one numpy call. An
update touches a single device: its tree positions are collected in Python and
added to that device's row in one numpy call.
"""

import numpy as np


class FenwickTree:
    """K Fenwick trees over levels 0..L-1 (float values)."""

    def __init__(self, values):
        """values: (K, L) initial value of each level on each device."""
        values = np.asarray(values, float)
        k, size = values.shape
        self.size = size
        tree = np.zeros((k, size + 1))
        tree[:, 1:] = values
        step = 1
        while step <= size:                       # linear-time build, one bit at a time
            child = np.arange(step, size + 1, 2 * step)
            parent = child + step
            ok = parent <= size
            tree[:, parent[ok]] += tree[:, child[ok]]
            step *= 2
        self._tree = tree

    def add(self, levels, device: int, amounts) -> None:
        """Add amounts[i] to level levels[i] of `device`."""
        size = self.size
        where, what = [], []
        for level, amount in zip(levels, amounts):
            i = int(level) + 1
            while i <= size:
                where.append(i)
                what.append(amount)
                i += i & -i
        np.add.at(self._tree[device], where, what)

    def prefix(self, end: int) -> np.ndarray:
        """Per device: the sum of levels 0..end-1."""
        return self._tree[:, _chain(end)].sum(axis=1)

    def range_sum(self, lo: int, hi: int) -> np.ndarray:
        """Per device: the sum of levels lo..hi-1 (zeros when hi <= lo)."""
        if hi <= lo:
            return np.zeros(self._tree.shape[0])
        return self.prefix(hi) - self.prefix(lo)


def _chain(end: int) -> list:
    """Tree positions whose sum is the prefix of length `end`."""
    out = []
    while end > 0:
        out.append(end)
        end &= end - 1
    return out

"""Kernels: loops over arrays that run compiled on large graphs, interpreted on small.

A kernel is a plain Python function over numpy arrays and scalars, written in the
subset of Python that numba compiles, with any helpers as inner functions (numba
inlines those, and so the whole kernel is one function either way). `@kernel` keeps
it as it is and adds:

- `.interpreted`: the function itself, run by CPython;
- `.compiled`: numba's compilation of the same source, made on first use and cached
  on disk (a few seconds, once per install), with numba imported only then;
- `.for_size(nodes)`: which of the two to run on a graph of that many nodes.

Both run the same statements in the same order on the same IEEE doubles, so their
results are identical to the bit (tests/test_compiled.py checks every kernel on
random graphs). Below INTERPRETED_BELOW nodes the interpreted loop finishes sooner
than numba can load its cached machine code (about half a second with numba's own
import), and a first placement after installing needs no compilation at all; the
choice depends only on the graph's size, so placements do not depend on it.
docs/data-structures.md ("numba") gives the measurements behind the threshold.
"""

from __future__ import annotations

import functools

INTERPRETED_BELOW = 2000


class Kernel:
    """A function with a compiled and an interpreted way to run it."""

    def __init__(self, function):
        functools.update_wrapper(self, function)
        self.interpreted = function
        self._compiled = None

    @property
    def compiled(self):
        if self._compiled is None:
            from numba import njit
            self._compiled = njit(cache=True)(self.interpreted)
        return self._compiled

    def for_size(self, nodes: int):
        return self.interpreted if nodes < INTERPRETED_BELOW else self.compiled


def kernel(function) -> Kernel:
    return Kernel(function)

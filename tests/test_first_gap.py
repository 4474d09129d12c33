"""The compiled first-gap query (pardnn.placers.pardnn.switching._first_gap) against a
readable one written from its docstring, on random busy timelines with ties (integer
times: intervals that touch, queries at an interval's start or end, zero lengths,
deadlines on an edge)."""

import math

import numpy as np
import pytest

from pardnn.placers.pardnn.switching import _Busy, _first_gap


def first_gap_reference(start, finish, t, length, deadline):
    """Walk the idle gaps from t: a gap runs from where the device is free (t, or the
    end of the op running at t) to the next op's start; the first gap at least `length`
    long is the answer if the op placed there is done by the deadline, else inf."""
    ops = sorted(zip(start.tolist(), finish.tolist()))
    free = next((f for s, f in ops if s <= t < f), t)
    while True:
        if free + length > deadline:
            return math.inf
        following = [(s, f) for s, f in ops if s >= free]
        if not following or following[0][0] - free >= length:
            return free
        free = following[0][1]


def random_timeline(rng):
    """One device's busy intervals: back to back or with integer gaps, one op at a time."""
    n = int(rng.integers(0, 12))
    gaps, runs = rng.integers(0, 4, n), rng.integers(1, 5, n)
    start = np.cumsum(gaps + np.concatenate([[0], runs[:-1]])).astype(float)
    return start, start + runs


@pytest.mark.parametrize("seed", range(60))
def test_compiled_first_gap_matches_the_readable_one(seed):
    rng = np.random.default_rng(seed)
    start, finish = random_timeline(rng)
    busy = _Busy(np.arange(len(start)), start, finish, _first_gap.compiled)
    horizon = float(finish[-1]) + 3 if len(finish) else 5.0
    for _ in range(150):
        t, length = float(rng.integers(0, horizon + 1)), float(rng.integers(0, 5))
        deadline = float(rng.integers(0, horizon + 6))
        assert busy.first_gap(t, length, deadline) == first_gap_reference(start, finish, t, length, deadline), \
            (start.tolist(), finish.tolist(), t, length, deadline)

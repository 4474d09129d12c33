"""The move finders' first-gap query (inside pardnn.placers.step1_phases.switching._moved_finish),
compiled and interpreted, against a readable one written from its docstring, on random
busy timelines with ties (integer times: intervals that touch, queries at an interval's
start or end, zero lengths, deadlines on an edge), and on a hand-made one."""

import math

import numpy as np
import pytest

from pardnn.placers.step1_phases.switching import Busy, Edges, Links, Times, _moved_finish


def first_gap(way, start, finish):
    """first_gap(t, length, deadline) on one device busy over [start, finish), asked of
    _moved_finish: node 1, computing `length`, moves to device 0 with no consumer; its one
    input comes from node 0 of its group (no transfer), which finishes at t."""
    busy = Busy(np.array([0, len(start)]), np.asarray(start, float), np.asarray(finish, float),
                np.arange(len(start)))
    edges = Edges(*(np.array(x, np.int64) for x in ([0, 0, 1], [0], [0], [0, 1, 1], [1], [0], [0], [0, 0])))
    links = Links(np.ones((1, 1), bool), np.zeros((1, 1)), np.zeros((1, 1)))
    moved_finish = getattr(_moved_finish, way)

    def query(t, length, deadline):
        times = Times(np.zeros(2, np.int64), np.array([0.0, length]), np.array([0.0, t]),
                      np.array([t, t + length]), np.array([t]))
        end = moved_finish(edges, times, busy, links, np.array([1]), np.array([0]), np.array([deadline]))[0]
        return end - length
    return query


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
def test_first_gap_matches_the_readable_one(seed):
    rng = np.random.default_rng(seed)
    start, finish = random_timeline(rng)
    way = "compiled" if seed % 2 else "interpreted"
    query = first_gap(way, start, finish)
    horizon = float(finish[-1]) + 3 if len(finish) else 5.0
    for _ in range(150):
        t, length = float(rng.integers(0, horizon + 1)), float(rng.integers(0, 5))
        deadline = float(rng.integers(0, horizon + 6))
        assert query(t, length, deadline) == first_gap_reference(start, finish, t, length, deadline), \
            (start.tolist(), finish.tolist(), t, length, deadline)


@pytest.mark.parametrize("way", ["interpreted", "compiled"])
def test_first_gap_finds_the_earliest_idle_slot_that_ends_by_the_deadline(way):
    query = first_gap(way, [0.0, 5.0, 8.0], [2.0, 7.0, 10.0])
    assert query(0.0, 3.0, 20.0) == 2.0         # between the first two ops
    assert query(0.0, 4.0, 20.0) == 10.0        # no gap of 4 before the last op
    assert query(0.0, 4.0, 12.0) == np.inf      # ... and after it, too late
    assert query(6.0, 1.0, 20.0) == 7.0         # asked while busy: from the op's end
    assert query(9.0, 2.0, 11.0) == np.inf      # 10 + 2 > 11
    assert first_gap(way, [], [])(3.0, 2.0, 10.0) == 3.0

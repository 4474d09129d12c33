"""The Fenwick tree agrees with naive prefix sums after any sequence of updates."""

import numpy as np
from hypothesis import strategies as st

from pardnn.placers.step1_phases.fenwick import FenwickTree

values = st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False)


@st.composite
def scenarios(draw):
    k = draw(st.integers(1, 4))
    size = draw(st.integers(1, 40))
    init = draw(st.lists(values, min_size=k * size, max_size=k * size))
    updates = draw(st.lists(st.tuples(st.integers(0, size - 1), st.integers(0, k - 1), values),
                            min_size=1, max_size=30))
    queries = draw(st.lists(st.tuples(st.integers(0, size), st.integers(0, size), st.booleans()).map(
        lambda q: (min(q[:2]), max(q[:2])) if q[2] else q[:2]), min_size=3, max_size=10))   # most in order
    return np.reshape(init, (k, size)), updates, queries


def updated(init, updates):
    """The tree and a plain array after the same updates."""
    tree = FenwickTree(init)
    naive = init.copy()
    for level, device, amount in updates:
        tree.add([level], device, [amount])
        naive[device, level] += amount
    return tree, naive


def test_range_sums_match_naive_prefix_sums(reached):
    """Reached when there was an update and a query over two levels or more."""
    def check(scenario):
        init, updates, queries = scenario
        tree, naive = updated(init, updates)
        scale = 1e-6 * (np.abs(naive).sum() + sum(abs(u[2]) for u in updates) + 1)
        for lo, hi in queries:
            expect = naive[:, lo:hi].sum(axis=1) if hi > lo else np.zeros(len(naive))
            assert np.allclose(tree.range_sum(lo, hi), expect, rtol=0, atol=scale)
            assert np.allclose(tree.prefix(hi), naive[:, :hi].sum(axis=1), rtol=0, atol=scale)
        return bool(updates) and any(hi - lo >= 2 for lo, hi in queries)

    reached(scenarios(), check, 200)


def test_batched_update_hits_each_level_once():
    tree = FenwickTree(np.zeros((2, 8)))
    tree.add([0, 3, 3, 7], 1, [1.0, 2.0, 4.0, 8.0])
    assert tree.range_sum(0, 8).tolist() == [0.0, 15.0]
    assert tree.range_sum(3, 4).tolist() == [0.0, 6.0]
    assert tree.range_sum(4, 7).tolist() == [0.0, 0.0]
    assert tree.range_sum(5, 2).tolist() == [0.0, 0.0]


def test_values_undoes_the_build_and_updates(reached):
    """Reached when there was an update."""
    def check(scenario):
        tree, naive = updated(*scenario[:2])
        assert np.allclose(tree.values(), naive.T, rtol=0, atol=1e-6 * (np.abs(naive).sum() + 1))
        return bool(scenario[1])

    reached(scenarios(), check, 50)

"""tools/interval_bound.py: the Fernandez-Bussell lower bound on the step time."""


import pytest

from pardnn.graph import CostGraph

from tools.interval_bound import interval_bound


def test_three_equal_independent_ops_on_two_devices_need_two_rounds():
    """max(critical path 10, work 30 / 2) = 15, but two devices need 20 for three
    10 us ops; the grid of intervals gets within 1% of that, and never above it."""
    g = CostGraph.build(names=["a", "b", "c"], comp_us=[10, 10, 10], edge_src=[], edge_dst=[], edge_bytes=[])
    assert 19.8 <= interval_bound(g, 2) <= 20.0


def test_a_chain_is_bounded_by_its_length():
    g = CostGraph.build(names=["a", "b", "c"], comp_us=[1, 2, 3], edge_src=[0, 1], edge_dst=[1, 2],
                        edge_bytes=[8, 8])
    assert interval_bound(g, 4) == pytest.approx(6.0)

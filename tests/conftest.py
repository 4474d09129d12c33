"""Fixtures shared by several test modules."""

import pytest

from pardnn.graph import CostGraph


@pytest.fixture
def chain_json(tmp_path):
    """A cost graph JSON file: the three-node chain a -> b -> c."""
    path = tmp_path / "g.json"
    CostGraph.build(names=["a", "b", "c"], comp_us=[1, 2, 3], out_bytes=[8, 8, 8],
                    edge_src=["a", "b"], edge_dst=["b", "c"], edge_bytes=[8, 8]).to_json(path)
    return path

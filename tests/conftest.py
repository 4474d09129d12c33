"""Fixtures shared by several test modules."""

import ortools.sat.python.cp_model  # noqa: F401  (before any test module imports TensorFlow: see pardnn.tf.quiet_import)
import pytest

from pardnn.graph import CostGraph


@pytest.fixture
def chain_json(tmp_path):
    """A cost graph JSON file: the three-node chain a -> b -> c."""
    path = tmp_path / "g.json"
    CostGraph.build(names=["a", "b", "c"], comp_us=[1, 2, 3], out_bytes=[8, 8, 8],
                    edge_src=["a", "b"], edge_dst=["b", "c"], edge_bytes=[8, 8]).to_json(path)
    return path


@pytest.fixture
def reached():
    """Runs a property over generated cases and counts those that reach it: call
    `reached(strategy, check, max_examples)`, where check(case) asserts the property and
    returns whether the case reached it (not vacuously true). Fails, naming the counts,
    when fewer than half did, and prints them (`pytest -s` shows them). The cases are
    derandomized, so the count is the same on every run."""
    from hypothesis import given, settings

    def run(strategy, check, max_examples):
        counts = {"cases": 0, "reached": 0}

        @settings(max_examples=max_examples, deadline=None, database=None, derandomize=True)
        @given(strategy)
        def each(case):
            counts["cases"] += 1
            counts["reached"] += bool(check(case))

        each()
        print(f"{counts['reached']} of {counts['cases']} generated cases reached the property")
        assert 2 * counts["reached"] >= counts["cases"], \
            f"only {counts['reached']} of {counts['cases']} generated cases reached the property"
        return counts

    return run

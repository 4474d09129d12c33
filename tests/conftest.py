"""Fixtures shared by several test modules."""

import ortools.sat.python.cp_model  # noqa: F401  (before any test module imports TensorFlow: see pardnn.tf.quiet_import)
import pytest
from hypothesis import settings
from hypothesis.internal.conjecture import providers

from pardnn.graph import CostGraph

# Every property test draws the same cases whatever else is collected and wherever it
# runs: derandomized (the cases follow from the test alone), no example database, no
# deadline (a shared 2-core machine is slow at times).
settings.register_profile("pardnn", derandomize=True, database=None, deadline=None)
settings.load_profile("pardnn")
# Besides, Hypothesis draws one value in twenty from the literals of every local module
# imported so far (`_get_local_constants`), so a test's cases changed with the test
# files collected beside it (a `reached` count went from 39 to 31 of 60 with
# test_repair_exact.py collected too). No setting turns that off: here it draws from
# Hypothesis' own constants only.
assert hasattr(providers, "_get_local_constants"), "Hypothesis moved _get_local_constants: update conftest.py"
providers._get_local_constants = lambda: providers.Constants()


@pytest.fixture
def chain_json(tmp_path):
    """A cost graph JSON file: the three-node chain a -> b -> c."""
    path = tmp_path / "g.json"
    CostGraph.build(names=["a", "b", "c"], comp_us=[1, 2, 3], out_bytes=[8, 8, 8],
                    edge_src=["a", "b"], edge_dst=["b", "c"], edge_bytes=[8, 8]).to_json(path)
    return path


REACHED_SHARE = 0.6     # of the generated cases, at least this share must reach the property


@pytest.fixture
def reached():
    """Runs a property over generated cases and counts those that reach it: call
    `reached(strategy, check, max_examples)`, where check(case) asserts the property and
    returns whether the case reached it (not vacuously true). Fails, naming the counts,
    when fewer than REACHED_SHARE did, and prints them (`pytest -s` shows them). The
    cases are derandomized and drawn from no module's literals (the "pardnn" profile
    above), so the count is the same on every run, whatever else is collected."""
    from hypothesis import given, settings

    def run(strategy, check, max_examples):
        counts = {"cases": 0, "reached": 0}

        @settings(max_examples=max_examples)
        @given(strategy)
        def each(case):
            counts["cases"] += 1
            counts["reached"] += bool(check(case))

        each()
        print(f"{counts['reached']} of {counts['cases']} generated cases reached the property")
        assert counts["reached"] >= REACHED_SHARE * counts["cases"], \
            f"only {counts['reached']} of {counts['cases']} generated cases reached the property"
        return counts

    return run

"""pardnn.keras.plan(..., micro_batches=M): the step run as M micro-batches with one
update, planned, built placed and trained on 4 logical CPU devices in a subprocess
(as a user's script runs), beside the same model unplaced and unsplit; the checks of
the micro-batch count. tests/helpers/keras_micro_script.py does the runs."""

import json
import os
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.tf, pytest.mark.slow]
HERE = os.path.dirname(os.path.abspath(__file__))
CASES = ["normalized:2", "transformer:4", "resnet:2", "bad", "normalized:auto", "normalized:4:early-micro-batch"]


@pytest.fixture(scope="module")
def facts(tmp_path_factory):
    root = tmp_path_factory.mktemp("keras_micro")
    proc = subprocess.run([sys.executable, os.path.join(HERE, "helpers", "keras_micro_script.py"), str(root),
                           *CASES], capture_output=True, text=True, timeout=1500)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("case", ["normalized:2", "transformer:4"])
def test_a_micro_batched_step_trains_as_the_unsplit_one(facts, case):
    """A custom loop (Adam; its last batch of 3 samples cut 2 + 1, weighted) and fit (an embedding's
    sparse gradient, SGD with momentum): every op where planned, one update per step,
    the losses and weights of the unsplit model up to rounding."""
    run = facts[case]
    assert run["moved"] == [] and run["devices"] == 4
    assert run["iterations"] == 3                            # one optimizer step per step, not M
    assert run["placed"][0] == pytest.approx(run["unplaced"][0], rel=1e-5)
    assert run["placed"] == pytest.approx(run["unplaced"], rel=1e-5)
    assert run["placed"][0] != run["placed"][-1]             # it trains
    assert run["weight_gap"] < 1e-5
    assert run["plan_micro_batches"] == int(case.split(":")[1])
    assert f"micro-batches: {case.split(':')[1]} per step, one update" in run["summary"]
    samples, per_sample, step = run["samples"]            # the planned batch, whatever the split
    assert samples == 8 and per_sample == pytest.approx(step / 8) and "8 per step)" in run["summary"]


def test_the_order_a_plan_carries_is_in_the_graphs_tf_runs(facts):
    """schedule= forced: order.csv's control edges are in the placed step's partition
    graphs (after Grappler, under TF's default config), and it trains as unsplit."""
    run = facts["normalized:4:early-micro-batch"]
    assert run["schedule"] == "early-micro-batch" and run["order"] > 100
    found, dropped = run["dropped"]
    assert found > run["order"] // 2 and dropped == 0
    assert run["moved"] == [] and run["placed"] == pytest.approx(run["unplaced"], rel=1e-5)
    assert "order early-micro-batch (tried: fifo " in run["summary"]


def test_auto_plans_each_count_until_the_step_grows_and_keeps_the_shortest(facts):
    run = facts["normalized:auto"]
    line = [x for x in run["summary"].splitlines() if x.startswith("micro-batches auto: ")][0]
    parts = [part.split() for part in line[len("micro-batches auto: "):].split(", ")]
    tried = {int(p[0].rstrip(":")): float(p[1]) for p in parts}          # "2: 0.90 ms (kept)"
    kept = [int(p[0].rstrip(":")) for p in parts if p[-1] == "(kept)"]
    assert list(tried)[:2] == [1, 2] and set(tried) <= {1, 2, 4, 8}
    assert len(kept) == 1 and tried[kept[0]] == min(tried.values())
    assert run["plan_micro_batches"] == kept[0]
    assert run["inputs_profile"] == os.path.join(run["directory"], "profile")     # moved, not planned again
    assert run["moved"] == [] and run["iterations"] == 3
    assert run["placed"] == pytest.approx(run["unplaced"], rel=1e-5)


def test_batch_normalization_gets_per_micro_batch_statistics_and_the_summary_says_so(facts):
    run = facts["resnet:2"]
    assert run["moved"] == [] and run["iterations"] == 3
    assert "per-micro-batch statistics in 5 BatchNormalization layer(s): batch_normalization," in run["summary"]
    assert run["placed"][0] != run["unplaced"][0]            # statistics of 4 samples, not 8: documented


def test_bad_micro_batch_counts_and_steps_are_one_line_errors(facts):
    bad = facts["bad"]
    for m in ("0", "3", "16"):
        assert bad[m] == (f"micro_batches: {m} micro-batches cannot split batch_spec's batch of 8 samples "
                          f"(give a divisor of 8 from 1 to 8)")
    assert bad["True"].startswith("micro_batches: give a whole number") and bad["two"].startswith("micro_batches:")
    assert bad["no_update"] == ("micro_batches: the step 'no_update' applied no gradients through a Keras "
                                "optimizer (optimizer.apply or apply_gradients); pardnn cannot split a step it "
                                "cannot see update")
    assert bad["written"] is False
    assert "pardnn: a batch of fewer samples than its 4 micro-batches" in bad["too_small"]

"""pardnn.keras.plan(..., recompute="on"): the plan's recomputed ops (recompute.csv)
carried into the placed tf.function (pardnn.tf.recompute_trace), trained on 2 logical
CPU devices in a subprocess (as a user's script runs) under TF's default function
config (Grappler on) and with Grappler off, beside the same model unplaced. tests/helpers/
keras_recompute_script.py does the runs."""

import json
import os
import re
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.tf, pytest.mark.slow]
HERE = os.path.dirname(os.path.abspath(__file__))
CASES = ["normalized", "transformer", "siamese", "normalized:grappler-off", "bad"]


@pytest.fixture(scope="module")
def facts(tmp_path_factory):
    root = tmp_path_factory.mktemp("keras_recompute")
    proc = subprocess.run([sys.executable, os.path.join(HERE, "helpers", "keras_recompute_script.py"), str(root),
                           *CASES], capture_output=True, text=True, timeout=1500)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("case", ["normalized", "transformer", "siamese", "normalized:grappler-off"])
def test_a_recomputed_step_trains_as_the_unplaced_one_and_runs_its_copies(facts, case):
    """A custom loop (normalized), fit (transformer; siamese, with dropout): every op
    where planned, the unplaced losses, the copies in the graphs TF ran and read by
    the backward pass there, none merged back into its original by Grappler (a reader
    of a copy reading the original instead)."""
    run = facts[case]
    assert run["moved"] == []
    assert run["placed"] == pytest.approx(run["unplaced"], rel=1e-6)
    assert len(run["copies"]) >= 10 and len(run["ran"]) >= len(run["copies"]) // 2
    checked, merged = run["merged"]
    assert checked >= 5 and merged == 0
    assert run["read"] >= 5
    if case.endswith("grappler-off"):                   # every copy a reader in the trace reads ran
        assert set(run["copies"]) - set(run["unread"]) <= set(run["ran"])


def test_a_dropout_models_random_ops_are_not_recomputed(facts):
    run = facts["siamese"]
    assert not [op for op in run["original_ops"].values() if re.search("Random", op)]


def test_a_stateful_op_in_recompute_csv_is_a_one_line_error(facts):
    bad = facts["bad"]
    assert bad["error"].endswith(f"recompute.csv: cannot recompute op {bad['op']!r}: AssignVariableOp is "
                                 f"stateful (a second run may give other values)")

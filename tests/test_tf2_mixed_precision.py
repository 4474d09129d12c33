"""TF2: a Keras mixed-precision model (float16 compute, a LossScaleOptimizer) placed on 3
logical CPU devices trains with the losses of the same model unplaced, whether its
plan was profiled from the running step or planned shape-only with estimated costs."""


import pytest

from helpers.script_run import script_facts

pytestmark = [pytest.mark.tf, pytest.mark.slow]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("mixed_precision")
    return script_facts("keras_mixed_precision_script.py", root)


@pytest.mark.parametrize("how", ["profiled", "planned"])
def test_a_mixed_precision_model_trains_placed_with_the_unplaced_losses(runs, how):
    run, unplaced = runs[how], runs["unplaced"]
    assert run["feasible"] and max(run["peaks"]) <= run["memory"] < runs["variables_bytes"]
    assert len(run["per_device"]) == 3                       # the step ran on all three devices
    assert run["moved"] == []                                # every op where it was placed
    assert run["placed"][0] == pytest.approx(unplaced[0], rel=1e-6)
    assert run["placed"] == pytest.approx(unplaced, rel=1e-5)
    assert unplaced[0] != unplaced[-1]                       # it trained

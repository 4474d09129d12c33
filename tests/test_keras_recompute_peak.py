"""Recomputation in a real Keras run holds less (issue 51): a two-block transformer
encoder planned on cpu:1 by pardnn.keras.plan with recompute "off" and "on"; the
placed step's first loss is the unplaced model's either way, and TF's allocator peak
over a traced step of the placed tf.function falls with the copies, by about what the
emulator predicts on the same measured profile (tools/bench_keras_recompute_run.py)."""

import pytest

import pardnn.tf.quiet_import  # noqa: F401  (quiet TensorFlow import first)

from tools.bench_keras_recompute_run import make, planned_run, unplaced_loss

pytestmark = [pytest.mark.tf, pytest.mark.slow]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("keras_recompute_peak")
    build, batch = make("keras-encoder", {"layers": 2})
    return {name: planned_run(build, batch, str(root / name), name) for name in ("off", "on")}, \
        unplaced_loss(build, batch)


def test_the_recomputing_plan_trains_as_the_unplaced_model(runs):
    (off, on), unplaced = (runs[0]["off"], runs[0]["on"]), runs[1]
    assert off["copies"] == 0 and on["copies"] > 0
    assert off["loss"] == pytest.approx(unplaced, rel=1e-6) and on["loss"] == pytest.approx(unplaced, rel=1e-6)


def test_the_allocator_holds_less_about_as_the_emulator_predicts(runs):
    off, on = runs[0]["off"], runs[0]["on"]
    print(f"measured {off['measured']} -> {on['measured']}; emulated {off['emulated']} -> {on['emulated']}")
    measured, emulated = on["measured"] / off["measured"], on["emulated"] / off["emulated"]
    assert emulated < 0.9 and measured < 0.9            # emulated -16%; measured -15% to -27% over runs
    assert abs(measured - emulated) < 0.12              # the session's threads vary the measured peak

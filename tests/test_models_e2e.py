"""End to end for every thesis family: the tiny config, profiled on cpu:1 and placed on
cpu:4, trains on 4 virtual CPU devices with exactly the losses of the unplaced run."""

import json

import pytest

import pardnn.tf.quiet_import  # noqa: F401  (quiet TensorFlow import first)
import tensorflow as tf

from pardnn.cli import main
from pardnn.models import resolve_knobs
from pardnn_builtin_models import load_module
from pardnn.tf import session_config
from pardnn.tf.run import run_placed, train

pytestmark = [pytest.mark.slow, pytest.mark.tf]
STEPS = 3


def _unplaced_losses(family):
    module = load_module(family)
    model = module.build(**resolve_knobs(module, "tiny"))
    with tf.compat.v1.Session(graph=model.graph, config=session_config(1)) as session:
        session.run(model.init)
        return train(session, model.train_op, model.loss, model.feed, STEPS)


@pytest.mark.parametrize("algorithm", ["round-robin", "pardnn"])
@pytest.mark.parametrize("family", ["word-rnn", "char-crn", "wrn", "transformer", "e3d"])
def test_tiny_config_placed_on_four_cpus_trains_like_the_unplaced_run(tmp_path, family, algorithm):
    assert main(["profile", family, "--size", "tiny", "--devices", "cpu:1", "--steps", "1",
                 "-o", str(tmp_path / "prof")]) == 0
    assert main(["place", str(tmp_path / "prof"), "--devices", "cpu:4", "--algorithm", algorithm,
                 "-o", str(tmp_path / "placed")]) == 0
    result = run_placed(tmp_path / "placed", load_module, STEPS)
    assert result.check.moved == []
    ran = {device for device, count in result.check.nodes_per_device.items() if count > 0}
    report = json.loads((tmp_path / "placed" / "report.json").read_text())
    placed_on = {d for d, count in zip(report["devices"], report["nodes_per_device"]) if count > 0}
    assert len(ran) >= 2 and placed_on <= ran           # the step really ran on several devices
    if algorithm == "round-robin":                     # every device runs part of the step
        assert len(ran) == 4
    assert result.losses == _unplaced_losses(family)   # bit for bit: placement changes no arithmetic

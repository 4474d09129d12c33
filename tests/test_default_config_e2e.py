"""Placed graphs run with TF's DEFAULT session config (Grappler's remapper on): every
family at tiny size, placed by pardnn and by round-robin on cpu:4, keeps every node
where it was placed and trains with the losses of the unplaced run."""

import pytest

import pardnn.tf.quiet_import  # noqa: F401  (quiet TensorFlow import first)
import tensorflow as tf

from pardnn.cli import main
from pardnn.models import resolve_knobs
from pardnn_builtin_models import load_module
from pardnn.tf.run import run_placed, train
from pardnn.tf.session import default_session_config

pytestmark = [pytest.mark.slow, pytest.mark.tf]
STEPS = 2


@pytest.fixture(scope="module", params=["mlp", "word-rnn", "char-crn", "wrn", "transformer", "e3d"])
def family_profile(tmp_path_factory, request):
    prof = tmp_path_factory.mktemp(request.param) / "prof"
    assert main(["profile", request.param, "--size", "tiny", "--steps", "1", "-o", str(prof)]) == 0
    module = load_module(request.param)
    model = module.build(**resolve_knobs(module, "tiny"))
    with tf.compat.v1.Session(graph=model.graph, config=default_session_config(1)) as session:
        session.run(model.init)
        unplaced = train(session, model.train_op, model.loss, model.feed, STEPS)
    return prof, unplaced


@pytest.mark.parametrize("algorithm", ["round-robin", "pardnn"])
def test_placement_survives_grappler(tmp_path, family_profile, algorithm):
    prof, unplaced = family_profile
    assert main(["place", str(prof), "--devices", "cpu:4", "--algorithm", algorithm,
                 "-o", str(tmp_path / "placed")]) == 0
    result = run_placed(tmp_path / "placed", load_module, STEPS, config="default")
    assert result.check.moved == []
    assert result.losses == pytest.approx(unplaced, rel=1e-5, abs=1e-6)


def test_run_command_with_the_default_config_says_so(tmp_path, capsys):
    assert main(["profile", "mlp", "--size", "tiny", "--steps", "1", "-o", str(tmp_path / "prof")]) == 0
    assert main(["place", str(tmp_path / "prof"), "--devices", "cpu:4", "--algorithm", "round-robin",
                 "-o", str(tmp_path / "placed")]) == 0
    capsys.readouterr()
    assert main(["run", str(tmp_path / "placed"), "--steps", "2", "--config", "default"]) == 0
    out = capsys.readouterr().out
    assert "session config: default" in out and out.count("loss ") == 2
    assert "moved from their requested device: 0" in out
    report = (tmp_path / "placed" / "report.json").read_text()
    assert '"fusions": {' in report and '"contraction_bias_activation": 2' in report

"""A user's own model script through profile -> place -> run, and `pardnn models`."""

import json
import textwrap

import numpy as np
import pytest

import pardnn.tf.quiet_import  # noqa: F401  (quiet TensorFlow import first)
from pardnn.cli import main
from pardnn_builtin_models import load_module

pytestmark = pytest.mark.tf

SCRIPT = textwrap.dedent('''
    import numpy as np
    import tensorflow as tf
    from pardnn.models import Model

    KNOBS = {"width": 3, "seed": 0}

    def build(width=3, seed=0):
        graph = tf.Graph()
        with graph.as_default():
            tf.compat.v1.set_random_seed(seed)
            x = tf.compat.v1.placeholder(tf.float32, [2, width], name="x")
            w = tf.compat.v1.get_variable("w", [width, 1], use_resource=True)
            loss = tf.reduce_mean(tf.square(tf.matmul(x, w)), name="loss")
            train = tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(loss, name="train")
            init = tf.compat.v1.global_variables_initializer()
        feed = lambda step: {"x:0": np.full((2, width), 1.0 + step, np.float32)}
        return Model(graph, train.name, loss.name, init.name, feed, seed)
''')


def test_script_model_profiles_places_and_runs(tmp_path, capsys):
    script = tmp_path / "my_model.py"
    script.write_text(SCRIPT)
    prof, placed = tmp_path / "prof", tmp_path / "placed"
    assert main(["profile", str(script), "--set", "width=5", "--steps", "1", "-o", str(prof)]) == 0
    doc = json.loads((prof / "profile.json").read_text())
    assert doc["model"] == str(script) and doc["knobs"] == {"width": 5, "seed": 0}
    assert main(["place", str(prof), "--devices", "cpu:2", "--algorithm", "round-robin", "-o", str(placed)]) == 0
    capsys.readouterr()
    assert main(["run", str(placed), "--steps", "2"]) == 0
    out = capsys.readouterr().out
    assert out.count("loss ") == 2 and "moved from their requested device: 0" in out


def test_models_lists_mlp_with_knobs_and_sizes(capsys):
    assert main(["models"]) == 0
    out = capsys.readouterr().out
    assert "mlp: " in out and "layers=2" in out and "--size tiny:" in out


def test_mlp_feed_is_deterministic_and_learnable():
    model = load_module("mlp").build(layers=1, hidden=8, inputs=4, classes=3, batch=5)
    a, b, c = model.feed(2), model.feed(2), model.feed(3)
    assert np.array_equal(a["x:0"], b["x:0"]) and not np.array_equal(a["x:0"], c["x:0"])
    assert a["y:0"].shape == (5, 3) and np.all(a["y:0"].sum(axis=1) == 1)
    assert model.loss == "loss:0" and model.train_op == "train" and model.init == "init"


def test_reprofiling_replaces_the_folder_and_a_foreign_folder_is_refused(tmp_path, capsys):
    out = tmp_path / "prof"
    assert main(["profile", "mlp", "--size", "tiny", "--steps", "3", "-o", str(out)]) == 0
    assert main(["profile", "mlp", "--size", "tiny", "--steps", "2", "-o", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == [
        ".pardnn-output.json", "graph.pb", "op_defs.pb", "profile.json", "run_metadata_0.pb", "run_metadata_1.pb"]
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    capsys.readouterr()
    assert main(["profile", "mlp", "--size", "tiny", "--steps", "1", "-o", str(mine)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"-o: {mine} is not empty and was not written by pardnn" in err
    assert [p.name for p in mine.iterdir()] == ["notes.txt"]

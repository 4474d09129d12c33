"""Bad profile dirs and bad flags: exit 2, one line on stderr naming the file or flag,
nothing written."""

import os
import shutil

import pytest

import pardnn.tf.quiet_import  # noqa: F401  (quiet TensorFlow import first)
import tensorflow as tf
from tensorflow.core.protobuf import config_pb2

from pardnn.cli import main
from pardnn_builtin_models import load_module
from pardnn.tf import profile_model

pytestmark = pytest.mark.tf


@pytest.fixture(scope="module")
def good_profile(tmp_path_factory):
    out = tmp_path_factory.mktemp("good") / "prof"
    model = load_module("mlp").build(layers=1, hidden=4, inputs=4, classes=2, batch=2)
    profile_model(model, steps=1, out_dir=str(out))
    return out


def _copy(good, tmp_path):
    bad = tmp_path / "bad"
    shutil.copytree(good, bad)
    return bad


def _place_fails(capsys, profile_dir, tmp_path, needle):
    out = tmp_path / "out"
    code = main(["place", str(profile_dir), "--devices", "cpu:2", "--algorithm", "round-robin", "-o", str(out)])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert len(err.splitlines()) == 1 and needle in err, err
    assert not out.exists()


def test_missing_graph_pb(good_profile, tmp_path, capsys):
    bad = _copy(good_profile, tmp_path)
    (bad / "graph.pb").unlink()
    _place_fails(capsys, bad, tmp_path, "no graph.pb")


def test_missing_run_metadata(good_profile, tmp_path, capsys):
    bad = _copy(good_profile, tmp_path)
    (bad / "run_metadata_0.pb").unlink()
    _place_fails(capsys, bad, tmp_path, "no run_metadata_<i>.pb")


@pytest.mark.parametrize("content", [b"", b"this is a text file, not a protobuf\n", b"\x0a\xff\xff\xff\x0f"])
def test_graph_pb_that_is_not_a_graph_def(good_profile, tmp_path, capsys, content):
    bad = _copy(good_profile, tmp_path)
    (bad / "graph.pb").write_bytes(content)
    _place_fails(capsys, bad, tmp_path, "graph.pb: not a serialized GraphDef")


def test_truncated_run_metadata(good_profile, tmp_path, capsys):
    bad = _copy(good_profile, tmp_path)
    data = (bad / "run_metadata_0.pb").read_bytes()
    (bad / "run_metadata_0.pb").write_bytes(data[: len(data) // 2])
    _place_fails(capsys, bad, tmp_path, "run_metadata_0.pb: not a serialized RunMetadata")


def test_run_metadata_from_another_graph(good_profile, tmp_path, capsys):
    bad = _copy(good_profile, tmp_path)
    meta = config_pb2.RunMetadata()
    dev = meta.step_stats.dev_stats.add(device="/job:localhost/replica:0/task:0/device:CPU:0")
    for name in ["_SOURCE", "x"] + [f"other_model/op_{i}" for i in range(9)]:
        dev.node_stats.add(node_name=name, all_end_rel_micros=3)
    (bad / "run_metadata_0.pb").write_bytes(meta.SerializeToString())
    _place_fails(capsys, bad, tmp_path, "run_metadata_0.pb: 9 of 10 step_stats nodes are not in graph.pb")


def test_untraced_run_metadata(good_profile, tmp_path, capsys):
    bad = _copy(good_profile, tmp_path)
    (bad / "run_metadata_0.pb").write_bytes(config_pb2.RunMetadata().SerializeToString())
    _place_fails(capsys, bad, tmp_path, "run_metadata_0.pb: no step_stats")


@pytest.mark.parametrize("argv, needle", [
    (["mlp", "--devices", "tpu:1"], "--devices"),
    (["mlp", "--devices", "cpu:0"], "--devices"),
    pytest.param(["mlp", "--devices", "gpu"], "--devices: gpu: TensorFlow sees no GPU here; give cpu:K",
                 marks=pytest.mark.skipif(bool(tf.config.list_physical_devices("GPU")), reason="a GPU is here")),
    (["mlp", "--steps", "0"], "--steps"),
    (["mlp", "--steps", "100000000000"], "--steps: need 1 to 1000 traced steps"),
    (["mlp", "--devices", "cpu:100000"], "--devices: expected cpu:K (1 <= K <= 1024)"),
    (["mlp", "--set", "depth=3"], "unknown knob 'depth'"),
    (["mlp", "--set", "layers=two"], "takes int"),
    (["mlp", "--set", "hidden=0"], "'hidden' must be at least 1"),
    (["mlp", "--size", "huge"], "--size"),
    (["resnet9000"], "unknown model family"),
    (["no/such/script.py"], "does not exist"),
])
def test_profile_bad_arguments(tmp_path, capsys, argv, needle):
    out = tmp_path / "prof"
    assert main(["profile", *argv, "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and needle in err, err
    assert not out.exists()


def test_profile_script_whose_build_fails(tmp_path, capsys):
    script = tmp_path / "broken.py"
    script.write_text("KNOBS = {'n': 1}\n\ndef build(n=1):\n    raise RuntimeError('no GPU here')\n")
    out = tmp_path / "prof"
    assert main(["profile", str(script), "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert "build() failed (RuntimeError: no GPU here)" in err and len(err.splitlines()) == 1
    assert not out.exists()


_GRAPH = """import tensorflow as tf
from pardnn.models import Model
def build():
    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [2], name="x")
        v = tf.Variable([1.0, 2.0], name="v")
        loss = tf.identity(tf.debugging.check_numerics(tf.reduce_sum(x * v) / 0.0 * 0.0, "nan!"), name="loss")
        tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(loss, name="train")
        init = tf.compat.v1.global_variables_initializer()
    return Model(graph=g, train_op=TRAIN, loss="loss:0", init=init.name, feed=FEED)
"""


@pytest.mark.parametrize("train, feed, needle", [
    ("'train'", "None", "its step failed to run (InvalidArgumentError: at node 'x': You must feed a value "
                        "for placeholder tensor 'x'"),
    ("'train'", "lambda step: {'x:0': [1.0, 2.0]}", "its step failed to run (InvalidArgumentError: at node "),
    ("'no_such_op'", "lambda step: {'x:0': [1.0, 2.0]}", "its step failed to run (ValueError: "),
    ("'train'", "lambda step: {'x:0': [1.0]}", "its step failed to run (ValueError: Cannot feed value of shape"),
])
def test_profile_script_whose_step_fails_to_run(tmp_path, capsys, train, feed, needle):
    script = tmp_path / "mine.py"
    script.write_text(f"TRAIN = {train}\nFEED = {feed}\n" + _GRAPH)
    out = tmp_path / "prof"
    assert main(["profile", str(script), "--steps", "1", "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"MODEL: {script}: {needle}" in err and "Traceback" not in err, err
    assert not out.exists()


def test_profile_script_whose_build_returns_no_model(tmp_path, capsys):
    script = tmp_path / "mine.py"
    script.write_text("def build():\n    return 42\n")
    assert main(["profile", str(script), "-o", str(tmp_path / "prof")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "build() returned int, not a pardnn.models.Model" in err
    assert not (tmp_path / "prof").exists()


def test_run_needs_a_placed_dir_with_profile_json(good_profile, tmp_path, capsys):
    assert main(["run", str(tmp_path / "nowhere")]) == 2
    assert "is not a directory" in capsys.readouterr().err
    assert main(["run", str(good_profile), "--steps", "1"]) == 2   # a profile dir, not placed
    err = capsys.readouterr().err.strip()
    assert "names no model" in err and len(err.splitlines()) == 1


def test_run_of_a_tf2_plan_says_how_to_train_it(tmp_path, capsys):
    (tmp_path / "profile.json").write_text('{"api": "profile_function", "function": "step"}')
    assert main(["run", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "pardnn.tf.variables_placed and pardnn.tf.placed" in err


@pytest.mark.parametrize("source, needle", [
    ("import no_such_module\n", "failed to import (ModuleNotFoundError: No module named 'no_such_module')"),
    ("def build(:\n", "failed to import (SyntaxError"),
    ("KNOBS = {'n': 1}\n", "defines no build(**knobs) function"),
    ("import sys\nsys.exit(3)\n", "called sys.exit(3) at import"),
])
def test_profile_script_that_cannot_be_used(tmp_path, capsys, source, needle):
    script = tmp_path / "mine.py"
    script.write_text(source)
    out = tmp_path / "prof"
    assert main(["profile", str(script), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"MODEL: {script} {needle}" in err and "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine.py"] and script.read_text() == source


@pytest.mark.parametrize("steps", ["0", "-2", "1000000000000"])
def test_run_needs_at_least_one_step_and_not_absurdly_many(good_profile, tmp_path, capsys, steps):
    placed = tmp_path / "placed"
    assert main(["place", str(good_profile), "--devices", "cpu:2", "--algorithm", "round-robin",
                 "-o", str(placed)]) == 0
    before = {p: p.read_bytes() for p in placed.rglob("*") if p.is_file()}
    capsys.readouterr()
    assert main(["run", str(placed), "--steps", steps]) == 2
    assert capsys.readouterr().err == f"pardnn run: error: --steps: need 1 to 100000 steps, got {steps}\n"
    assert {p: p.read_bytes() for p in placed.rglob("*") if p.is_file()} == before


def test_profile_refuses_an_output_folder_before_profiling(tmp_path, capsys):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep")
    assert main(["profile", "mlp", "--size", "tiny", "-o", str(mine)]) == 2
    assert "is not empty and was not written by pardnn" in capsys.readouterr().err
    script = tmp_path / "prof" / "my_model.py"           # a pardnn folder holding the script
    assert main(["profile", "mlp", "--size", "tiny", "--steps", "1", "-o", str(script.parent)]) == 0
    script.write_text("KNOBS = {}\n")
    capsys.readouterr()
    assert main(["profile", str(script), "-o", str(script.parent)]) == 2
    assert f"holds the input {script}" in capsys.readouterr().err
    assert script.exists() and (mine / "notes.txt").read_text() == "keep"


def test_profile_of_a_file_that_is_no_python_script(tmp_path, capsys):
    graph = tmp_path / "g.json"
    graph.write_text('{"format": "pardnn-costgraph", "version": 1, "nodes": [], "edges": []}')
    assert main(["profile", str(graph), "-o", str(tmp_path / "prof")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is not a Python script" in err and "pardnn place" in err


@pytest.mark.parametrize("doc, needle", [
    ('{"model": 5}', "MODEL: 5 is neither a model family nor a script path"),
    ('{"model": "mlp", "knobs": [1, 2]}', "knobs must be a mapping"),
])
def test_run_of_a_profile_json_naming_no_usable_model(tmp_path, capsys, doc, needle):
    (tmp_path / "profile.json").write_text(doc)
    assert main(["run", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and needle in err


def _placed_script(tmp_path, loss):
    """(the script, its placed dir): _GRAPH with `loss` for a loss that trains, profiled
    and placed on 2 CPUs."""
    script = tmp_path / "mine.py"
    script.write_text("TRAIN = 'train'\nFEED = lambda step: {'x:0': [1.0, 2.0]}\n" + _GRAPH.replace(
        "tf.debugging.check_numerics(tf.reduce_sum(x * v) / 0.0 * 0.0, \"nan!\")", loss))
    prof, placed = tmp_path / "prof", tmp_path / "placed"
    assert main(["profile", str(script), "--steps", "1", "-o", str(prof)]) == 0
    assert main(["place", str(prof), "--devices", "cpu:2", "-o", str(placed)]) == 0
    return script, placed


def test_run_of_a_script_whose_step_now_fails(tmp_path, capsys):
    script, placed = _placed_script(tmp_path, "tf.reduce_sum(x * v)")
    script.write_text(script.read_text().replace("[1.0, 2.0]", "[1.0]"))      # the feed changed since
    capsys.readouterr()
    assert main(["run", str(placed), "--steps", "1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "its step failed to run (ValueError: Cannot feed value of shape" in err


def test_a_failure_of_pardnn_itself_is_not_blamed_on_the_script(tmp_path, monkeypatch):
    import pardnn.tf.profiling as profiling
    script = tmp_path / "mine.py"
    script.write_text("TRAIN = 'train'\nFEED = lambda step: {'x:0': [1.0, 2.0]}\n" + _GRAPH.replace(
        "tf.debugging.check_numerics(tf.reduce_sum(x * v) / 0.0 * 0.0, \"nan!\")", "tf.reduce_sum(x * v)"))

    from pardnn.base.units import format_size
    # a bug raised in pardnn's own code (here units.py) while it writes the profile
    monkeypatch.setattr(profiling, "write_profile_dir", lambda *args, **kwargs: format_size("a bug"))
    with pytest.raises(ValueError, match="could not convert string to float"):
        main(["profile", str(script), "--steps", "1", "-o", str(tmp_path / "prof")])
    # and one pardnn's code makes a library raise (here os.path)
    monkeypatch.setattr(profiling, "write_profile_dir", lambda *args, **kwargs: os.path.join(None, "x"))
    with pytest.raises(TypeError):
        main(["profile", str(script), "--steps", "1", "-o", str(tmp_path / "prof")])


@pytest.mark.parametrize("feed, needle", [
    ("lambda: {'x:0': [1.0, 2.0]}", "the Model's feed must be None or a function step -> feed dict"),
    ("{'x:0': [1.0, 2.0]}", "the Model's feed must be None or a function step -> feed dict"),
])
def test_a_script_whose_feed_is_no_function_of_the_step(tmp_path, capsys, feed, needle):
    script = tmp_path / "mine.py"
    script.write_text(f"TRAIN = 'train'\nFEED = {feed}\n" + _GRAPH)
    assert main(["profile", str(script), "--steps", "1", "-o", str(tmp_path / "prof")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and needle in err


def test_run_of_a_script_whose_loss_is_no_scalar(tmp_path, capsys):
    _, placed = _placed_script(tmp_path, "x * v")
    capsys.readouterr()
    assert main(["run", str(placed), "--steps", "1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "the loss 'loss:0' has shape [2]; `pardnn run` prints one loss" in err


def test_a_failure_in_a_module_of_the_users_is_the_scripts(tmp_path, capsys):
    (tmp_path / "mydata.py").write_text("def feed(step):\n    raise RuntimeError('no data for step %d' % step)\n")
    script = tmp_path / "mine.py"
    script.write_text("import os, sys\nsys.path.insert(0, os.path.dirname(__file__))\nimport mydata\n"
                      "TRAIN = 'train'\nFEED = mydata.feed\n" + _GRAPH)
    assert main(["profile", str(script), "--steps", "1", "-o", str(tmp_path / "prof")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "its step failed to run (RuntimeError: no data for step 0)" in err

"""pardnn.keras: Keras models planned in-process, built placed and trained (fit and a
custom loop) on 4 logical CPU devices, in subprocesses that run as a user's script
(TF's default config, no clear_session); the plan loaded in another process;
checkpoints both ways; bad inputs refused in one line before anything runs."""

import json
import os
import random
import re
import subprocess
import sys

import numpy as np
import pytest

import pardnn.tf.quiet_import  # noqa: F401  (quiet TensorFlow import first)
import tensorflow as tf

from pardnn.base.errors import UserError

pytestmark = pytest.mark.tf
HERE = os.path.dirname(os.path.abspath(__file__))
MODELS = ["resnet", "transformer", "siamese", "normalized"]


def start(mode, root, *args):
    return subprocess.Popen([sys.executable, os.path.join(HERE, "helpers", "keras_plan_script.py"), mode, str(root),
                             *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def start_example(root):
    """examples/keras_fit.py (the README's TF2 example) run in a folder of its own."""
    os.makedirs(root / "example")
    return subprocess.Popen([sys.executable, os.path.join(HERE, "..", "examples", "keras_fit.py")],
                            cwd=root / "example", stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def result(proc, parse=True):
    out, err = proc.communicate(timeout=900)
    assert proc.returncode == 0, err[-3000:]
    return json.loads(out.strip().splitlines()[-1]) if parse else out


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("keras_plan")


@pytest.fixture(scope="module")
def runs(root):
    """Four runs, two at a time (each is mostly one Python thread tracing): resnet,
    siamese and the bad inputs, then the other process loading siamese's plan;
    transformer and the custom loop, then the README's example."""
    procs = [start("models", root, "resnet", "siamese", "bad"), start("models", root, "transformer", "normalized")]
    try:
        facts = result(procs[0])
        procs.append(start("reload", root))
        facts.update(result(procs[1]))
        procs.append(start_example(root))
        facts["reload"] = result(procs[2])
        facts["example"] = result(procs[3], parse=False)
        return facts
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()


@pytest.fixture(scope="module")
def models(runs):
    return runs


@pytest.fixture(scope="module")
def reload(runs):
    return runs["reload"]


@pytest.mark.slow
@pytest.mark.parametrize("name", MODELS)
def test_every_variable_is_built_where_planned_and_trains_unmoved(models, name):
    facts = models[name]
    assert facts["variables"] == facts["planned"] == facts["keyed"] > 20    # optimizer slots included
    assert facts["wrong_device"] == [] and facts["off_placement_csv"] == []
    assert facts["devices_used"] == 4
    assert facts["moved"] == [] and len(facts["per_device"]) == 4          # every op ran where placed
    assert facts["placed"][0] == facts["unplaced"][0]                       # the same first loss, bit for bit
    assert facts["placed"] == pytest.approx(facts["unplaced"], rel=1e-5)    # equal here; docs/tf2.md "Drift"
    assert facts["placed"][0] != facts["placed"][-1]
    assert facts.get("jit_compile") in (None, False)                    # resnet's, set True: no XLA cluster


@pytest.mark.slow
@pytest.mark.parametrize("name", ["resnet", "transformer", "siamese"])
@pytest.mark.parametrize("kind", ["evaluate", "predict"])
def test_evaluate_and_predict_of_a_model_built_in_the_scope_run_placed(models, name, kind):
    """The scope places test_step and predict_step too (issue 52, item 6): their ops
    follow the fit plan (named as the training step's forward ops, or with their
    variable or input), every one ran on the device it asked for, on several devices,
    with the results of the unplaced model built alike (its steps traced, as the placed
    ones, with the batch size unknown), bit for bit; siamese's data ends on a half batch."""
    facts = models[name][kind]
    assert facts["moved"] == [] and len(facts["per_device"]) >= 2
    assert sum(facts["per_device"].values()) > 20 and facts["named"] > facts["ops"] / 2
    assert len(facts["placed"]) == len(facts["unplaced"]) > 0
    for placed, unplaced in zip(facts["placed"], facts["unplaced"]):
        np.testing.assert_array_equal(placed, unplaced)


@pytest.mark.slow
def test_a_layer_reading_its_variables_when_built_reads_their_initial_values(models):
    assert models["normalized"]["read_in_build"] == [24.0, 24.0]            # sum of 24 ones, not of nothing


@pytest.mark.slow
def test_bad_inputs_are_one_line_errors_before_anything_runs(models):
    bad = models["bad"]
    for key, message in bad.items():
        if isinstance(message, str):
            assert "\n" not in message, key
    assert "variable 'dense/kernel' of layer 'dense' (Dense) has shape [16, 16] float32; the plan's variable " \
           "created there, 'layers[19]/kernel', has [16, 10]" in bad["layer_added"]
    assert "of layer 'dense_1' (Dense) has shape [16, 12] float32" in bad["shape_changed"]
    assert "layer layers[19] of the model built is a ReLU, the plan's is a Dense" in bad["layer_without_variables_added"]
    assert re.search(r"six/placement.csv:\d+: device '/job:localhost/replica:0/task:0/device:CPU:[45]' is not "
                     r"one of this process's devices \(/device:CPU:0, ", bad["lacking_devices"])
    assert bad["lacking_devices_built"] == 0                               # refused on entering the scope
    assert bad["no_model"].startswith("build: returned None, no keras.Model")
    assert bad["optimizer_only"].startswith("build: returned an Adam, no keras.Model")
    assert "is not compiled; compile it in build" in bad["not_compiled"]
    assert bad["input_missing"] == "batch_spec: has no input 'b' (the model's inputs: a, b)"
    assert bad["input_shape"] == "batch_spec: input 'input_layer' has shape [8, 12, 12, 4], the model's takes " \
                                 "[None, 12, 12, 3]"
    assert bad["target_shape"].startswith("batch_spec: the step cannot be traced with it (Argument `output` must "
                                          "have rank")
    assert bad["written"] == []                                            # no plan folder left behind


@pytest.mark.slow
def test_another_process_loads_the_plan_and_trains_the_same(models, reload):
    assert reload["where"]["wrong_device"] == [] and reload["where"]["variables"] == models["siamese"]["variables"]
    assert reload["same_placement"]                                        # planned again: the same placement.csv
    assert reload["placed"] == models["siamese"]["placed"][:2]


@pytest.mark.slow
def test_checkpoints_go_both_ways_with_identical_values(reload):
    assert reload["weights_to_unplaced"] and reload["weights_to_placed"]   # model.save_weights
    assert reload["checkpoint_holds"] == reload["checkpointed"] > 0          # tf.train.Checkpoint
    assert reload["checkpoint_to_unplaced"] and reload["checkpoint_to_placed"]
    assert reload["unplaced"] == reload["placed"]


@pytest.mark.slow
def test_a_placed_model_restored_from_a_checkpoint_continues_as_the_unplaced_one(reload):
    assert reload["restored_alike"] and reload["restored_wrong_device"] == []
    assert reload["continued_moved"] == []
    assert reload["continued_placed"] == reload["continued_unplaced"]


@pytest.mark.slow
def test_a_placed_models_keras_file_loads_anywhere(root, reload):
    import keras
    model = keras.models.load_model(root / "placed.keras")                 # this process: one CPU device
    saved = np.load(root / "placed_weights.npz")
    assert all(np.array_equal(v.numpy(), saved[f"arr_{i}"]) for i, v in enumerate(model.weights))
    assert {v.value.device for v in model.weights} == {"/job:localhost/replica:0/task:0/device:CPU:0"}


def test_plan_arguments_are_checked_before_anything_is_built(tmp_path):
    import pardnn.keras
    spec = (tf.TensorSpec([4, 8]), tf.TensorSpec([4, 2]))
    calls = []

    def build():
        calls.append(1)

    cases = [({"devices": "cpu:2", "memory": "lots"}, "memory: "),
             ({"devices": "tpu:2"}, "devices: unknown device preset 'tpu:2'"),
             ({"devices": "gpu:2"}, "memory: 'auto' reads the memory of this process's GPUs"),
             ({"devices": "cpu:2", "reserve": 1.5}, r"reserve: must be a fraction in \[0, 1\)"),
             ({"devices": "cpu:2", "algorithm": "magic"}, "magic"),
             ({"devices": "cpu:2", "time_budget": -1}, "time_budget: give seconds"),
             ({"devices": "cpu:2", "recompute": "yes"}, "recompute: expected auto, on or off, got 'yes'"),
             ({"devices": "cpu:2", "memory_order": "first"}, "memory_order: expected auto, on or off, got 'first'")]
    for kwargs, message in cases:
        if kwargs["devices"] == "gpu:2" and tf.config.list_physical_devices("GPU"):
            continue
        with pytest.raises(UserError, match=message):
            pardnn.keras.plan(build, spec, directory=str(tmp_path / "p"), verbose=0, **kwargs)
    with pytest.raises(UserError, match="build: 3 is not callable"):
        pardnn.keras.plan(3, spec, "cpu:2", directory=str(tmp_path / "p"))
    with pytest.raises(UserError, match=r"batch_spec: a spec of shape \[None, 8\] is not fully known"):
        pardnn.keras.plan(build, (tf.TensorSpec([None, 8]),), "cpu:2", directory=str(tmp_path / "p"))
    with pytest.raises(UserError, match="batch_spec: str 'x' is not a tf.TensorSpec"):
        pardnn.keras.plan(build, ("x",), "cpu:2", directory=str(tmp_path / "p"))
    assert calls == [] and not (tmp_path / "p").exists()


@pytest.mark.parametrize("content, message", [
    (None, "cannot read"),
    ("{", "not JSON"),
    ('{"pardnn_keras_plan": 1, "kind": "fit", "variables": [{"key": 1}], "layers": []}',
     r"variables\[0\]: expected key, name, short, shape, dtype and device"),
    ('{"pardnn_keras_plan": 7, "kind": "fit"}', "not a plan pardnn.keras wrote"),
])
def test_load_plan_refuses_a_folder_that_is_no_plan(tmp_path, content, message):
    import pardnn.keras
    if content is not None:
        (tmp_path / "plan.json").write_text(content)
    with pytest.raises(UserError, match=message):
        pardnn.keras.load_plan(tmp_path)


@pytest.mark.slow
def test_the_readmes_example_runs_and_is_examples_keras_fit(root, runs):
    assert "Epoch 2/2" in runs["example"] and "pardnn: " in runs["example"]
    assert (root / "example" / "pardnn_plan" / "plan.json").exists()
    readme = open(os.path.join(HERE, "..", "README.md")).read()
    block = readme.split("### TF2: Keras in three lines\n\n```python\n", 1)[1].split("```", 1)[0]
    example = [line.split("  #")[0].rstrip() for line in open(os.path.join(HERE, "..", "examples", "keras_fit.py"))]
    lines = [line.split("  #")[0].rstrip() for line in block.splitlines() if line.strip()]
    at = 0
    for line in lines:                                  # each README line is the example's, in order
        assert line in example[at:], line
        at = example.index(line, at) + 1


@pytest.mark.slow
def test_the_cli_reads_a_plan_folder(root, runs, capsys):
    from pardnn.cli import main
    plan = root / "siamese"
    assert main(["explain", str(plan)]) == 0                           # inputs.json: its profile and cluster
    report = json.loads((plan / "report.json").read_text())
    assert main(["emulate", str(plan / "profile"), "--placement", str(plan / "placement.csv"), "--devices", "cpu:4",
                 "--memory", "48KiB", "--reserve", "0", "--report", str(root / "emulated.json")]) == 0
    emulated = json.loads((root / "emulated.json").read_text())
    assert emulated["makespan_us"] == report["makespan_us"]
    assert emulated["peak_memory_bytes"] == report["peak_memory_bytes"]


def test_random_ops_without_a_seed_draw_from_the_builds_own_generator(tmp_path):
    """Keras' random ops given no seed (ConvNeXt's stochastic depth) draw from a global
    generator whose variable the first trace creates. An unplaced model trained first
    made the process's; the plan's build and the scope's each have their own, so the
    placed step reads the variable created in the scope, where the plan put it
    (before: 'the plan's variable ... seed_generator_state was not created')."""
    import keras
    import pardnn.keras

    class DropPath(keras.layers.Layer):
        def call(self, x, training=None):
            if training:
                return x * keras.ops.floor(0.8 + keras.random.uniform((keras.ops.shape(x)[0], 1)))
            return x

    def build():                    # no keras.utils.set_random_seed, which would reset the generator
        inputs = keras.Input((6,))
        hidden = keras.layers.Dense(6, kernel_initializer=keras.initializers.GlorotUniform(seed=1))(inputs)
        outputs = keras.layers.Dense(2, kernel_initializer=keras.initializers.GlorotUniform(seed=2))(DropPath()(hidden))
        model = keras.Model(inputs, outputs)
        model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="mse")
        return model

    x, y = np.ones((8, 6), np.float32), np.ones((8, 2), np.float32)
    unplaced = build()
    random.seed(0)                  # what a generator made without a seed seeds itself from
    first = unplaced.fit(x, y, batch_size=8, verbose=0).history["loss"]
    plan = pardnn.keras.plan(build, (x, y), devices="cpu:1", memory="1MiB", reserve=0,
                             directory=str(tmp_path / "plan"), verbose=0)
    assert [v.key for v in plan._variables if v.key.endswith("seed_generator_state")] != []
    random.seed(0)
    with plan.scope():
        model = build()
    assert model.fit(x, y, batch_size=8, verbose=0).history["loss"] == first


def test_a_grouped_convolution_trains_placed(tmp_path):
    """The smallest model of issue 52's ConvNeXt failure: Keras runs a grouped (depthwise)
    convolution on a CPU through an inner tf.function compiled with XLA, whose variable
    handle TF named by a process-wide counter; fit refused the plan ('does not match the
    trace of train_step: 1 of its ... ops are not in the placement')."""
    import keras
    import pardnn.keras

    def build():
        keras.utils.set_random_seed(0)
        inputs = keras.Input((8, 8, 4))
        x = keras.layers.Conv2D(4, 3, groups=4, padding="same")(inputs)
        model = keras.Model(inputs, keras.layers.Dense(2)(keras.layers.GlobalAveragePooling2D()(x)))
        model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="mse")
        return model

    x, y = np.ones((8, 8, 8, 4), np.float32), np.ones((8, 2), np.float32)
    unplaced = build()
    first = unplaced.fit(x, y, batch_size=8, verbose=0).history["loss"]
    plan = pardnn.keras.plan(build, (x, y), devices="cpu:1", memory="1MiB", reserve=0,
                             directory=str(tmp_path / "plan"), verbose=0)
    with plan.scope():
        model = build()
    assert model.fit(x, y, batch_size=8, verbose=0).history["loss"] == pytest.approx(first, rel=1e-6)

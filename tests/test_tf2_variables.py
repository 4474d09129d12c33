"""TF2: a Keras model planned without allocating it, its variables created where
the plan says (pardnn.tf.variables_placed), trained placed; bad inputs refused."""

import contextlib
import json

import re

import pytest

import pardnn.tf.quiet_import  # noqa: F401  (quiet TensorFlow import first)
import tensorflow as tf

from pardnn.base.errors import UserError
from pardnn.tf import placed as pardnn_placed, profile_function, shape_only_variables, variables_placed

from helpers.script_run import script_facts

pytestmark = pytest.mark.tf


@pytest.fixture(scope="module")
def flow(tmp_path_factory):
    root = tmp_path_factory.mktemp("keras_placed")
    return script_facts("keras_placed_script.py", root)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["loop", "fit"])
def test_a_model_four_times_the_budget_trains_placed(flow, kind):
    facts = flow[kind]
    assert facts["variable_bytes"] >= 4 * facts["budget"]           # weights + Adam slots: 4x
    assert facts["budget"] < facts["variable_bytes"] / 3            # below all gradients' size
    assert facts["gathers"] == ["adam/IdentityN"]                   # Keras' gather, bypassed
    assert facts["emulated_feasible"]
    assert max(facts["emulated_peaks"]) <= facts["budget"]
    built, plan = facts["built"], facts["plan_resident"]
    assert built["variables"] > 0 and built["wrong_device"] == []   # every variable where planned
    assert len(plan) > 1 and sorted(built["bytes_per_device"]) == sorted(plan)
    for device, size in plan.items():
        assert built["bytes_per_device"][device] == pytest.approx(size, rel=0.01)
        assert size <= facts["budget"]
    assert facts["moved"] == []                                     # every op ran where placed
    assert len(facts["per_device"]) == len(plan) and sum(facts["per_device"].values()) > 500
    assert facts["placed"] == pytest.approx(facts["unplaced"], rel=1e-5)
    assert facts["placed"][0] != facts["placed"][-1]                # it trained


@pytest.mark.slow
def test_bad_inputs_are_one_line_errors_before_any_step(flow):
    bad = flow["bad"]
    for message in (bad["another_model"], bad["outside_plan"], bad["lacking_device"], bad["built_outside"]):
        assert message is not None and "\n" not in message
    assert "variable 'sequential/dense_12/kernel:0' has shape [128, 128], the plan's has [128, 8]: " \
        "a placement of another model" in bad["another_model"]
    assert "variable 'adam/" in bad["outside_plan"] and "is on /device:CPU:0, the plan puts it" \
        in bad["outside_plan"]
    assert "device '/job:localhost/replica:0/task:0/device:CPU:9' is not one of this process's" \
        in bad["lacking_device"]
    # which of the layer's variables the message names first depends on the placement
    assert re.search(r"variable 'sequential/dense/(kernel|bias):0' is on /device:CPU:0", bad["built_outside"])
    assert bad["outside_plan_steps"] == 0 and bad["built_outside_steps"] == 0


def test_shape_only_variables_hold_no_value_and_cannot_be_measured(tmp_path):
    with shape_only_variables():
        v = tf.Variable(lambda: tf.random.normal([4096, 4096]), name="big")
    assert v.shape == (4096, 4096) and v.dtype == tf.float32
    assert not v.is_initialized()

    @tf.function
    def step(x):
        return tf.reduce_sum(tf.matmul(x, v))
    with pytest.raises(UserError, match="variables: big:0 holds no value"):
        profile_function(step, (tf.ones([2, 4096]),), out_dir=str(tmp_path / "p"))
    assert not (tmp_path / "p").exists()
    doc = profile_function(step, (tf.TensorSpec([2, 4096]),), out_dir=str(tmp_path / "e"), estimate="dgx-h100")
    assert doc["costs"]["source"] == "estimated" and list(doc["variables"].values()) == ["big:0"]


def test_estimate_flags_without_estimate_are_refused(tmp_path):
    @tf.function
    def step(x):
        return x * 2.0
    with pytest.raises(UserError, match="op_overhead_us, precision and conv_efficiency apply to estimated costs"):
        profile_function(step, (tf.ones([2]),), out_dir=str(tmp_path / "p"), precision="fp16")
    with pytest.raises(UserError, match="apply to estimated costs"):
        profile_function(step, (tf.ones([2]),), out_dir=str(tmp_path / "p"), conv_efficiency=0.5)
    with pytest.raises(UserError, match="estimate"):
        profile_function(step, (tf.ones([2]),), out_dir=str(tmp_path / "p"), estimate="dgx-9000")
    for share in (0, 1.5, float("nan"), "0.5", True, 1e-300):
        with pytest.raises(UserError, match=r"conv_efficiency: cannot use .* \(give a share of the peak rate from 0.01 to 1"):
            profile_function(step, (tf.ones([2]),), out_dir=str(tmp_path / "p"), estimate="dgx-h100",
                             conv_efficiency=share)
    assert not (tmp_path / "p").exists()


def test_a_placement_without_variables_is_refused(tmp_path):
    (tmp_path / "placement.csv").write_text("node,device\nx,/device:CPU:0\n")
    (tmp_path / "profile.json").write_text('{"api": "profile"}')
    with pytest.raises(UserError, match=r"profile.json: lists no variables"):
        with variables_placed(str(tmp_path / "placement.csv")):
            pass


def plan_of(tmp_path, variables, shapes=None):
    """A placement.csv on CPU:0 and its profile.json `variables` (node -> name)."""
    rows = "".join(f"{node},/job:localhost/replica:0/task:0/device:CPU:0\n" for node in variables)
    (tmp_path / "placement.csv").write_text("node,device\n" + rows)
    (tmp_path / "profile.json").write_text(json.dumps({"variables": variables, "variable_shapes": shapes}))
    return str(tmp_path / "placement.csv")


def test_variables_are_matched_by_name_and_unknown_ones_refused(tmp_path):
    path = plan_of(tmp_path, {"w_node": "layer/kernel:0", "s1": "seed:0", "s2": "seed:0"})
    with variables_placed(path):
        with tf.name_scope("layer"):
            w = tf.Variable(tf.zeros([2]), name="kernel")
        seeds = [tf.Variable(0, name="seed") for _ in range(2)]
        assert w.device.endswith("device:CPU:0") and all(s.device.endswith("CPU:0") for s in seeds)
        with pytest.raises(UserError, match=r"variable 'seed:0' created 3 times, the plan has 2"):
            tf.Variable(0, name="seed")
        with pytest.raises(UserError, match=r"variable 'layer/kernal:0' is not in the plan "
                                            r"\(nearest: layer/kernel:0"):
            with tf.name_scope("layer"):
                tf.Variable(tf.zeros([2]), name="kernal")
    with variables_placed(path, others="/device:CPU:0"):
        assert tf.Variable(1.0, name="extra").device.endswith("device:CPU:0")
    with pytest.raises(UserError, match=r"others: device '/device:CPU:5' is not one of this process's"):
        variables_placed(path, others="/device:CPU:5").__enter__()


def test_a_variable_of_another_shape_is_another_models(tmp_path):
    path = plan_of(tmp_path, {"w_node": "kernel:0"}, {"w_node": [8, 16]})
    with variables_placed(path):
        with pytest.raises(UserError, match=r"variable 'kernel:0' has shape \[8, 12\], the plan's has "
                                            r"\[8, 16\]: a placement of another model"):
            tf.Variable(tf.zeros([8, 12]), name="kernel")


def test_a_mixed_precision_model_traces_the_same_shape_only():
    """Keras casts each variable to its layer's compute dtype; TF skips a cast to the
    variable's own dtype only for a ResourceVariable, so shape-only stand-ins must
    trace as one, or a plan made shape-only names ops ("Cast/Cast/ReadVariableOp")
    the real model's trace lacks."""
    import keras
    policy = keras.mixed_precision.dtype_policy()

    def names(shape_only):
        keras.backend.clear_session()
        with shape_only_variables() if shape_only else contextlib.nullcontext():
            keras.mixed_precision.set_dtype_policy("mixed_float16")
            model = keras.Sequential([keras.layers.Input((16,)), keras.layers.Dense(32, activation="relu"),
                                      keras.layers.Dense(32, activation="relu"),
                                      keras.layers.Dense(4, dtype="float32")])
            opt = keras.optimizers.Adam(1e-2)
            opt.build(model.trainable_variables)

        @tf.function
        def step(x, y):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(model(x, training=True) - y))
            opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
            return loss
        graph = step.get_concrete_function(tf.TensorSpec([8, 16]), tf.TensorSpec([8, 4])).graph
        return sorted(op.name for op in graph.get_operations())
    try:
        real, shape_only = names(False), names(True)
    finally:
        keras.mixed_precision.set_dtype_policy(policy)
    assert any("Cast/ReadVariableOp" in name for name in real) and shape_only == real


def test_a_variable_the_step_never_touches_goes_to_the_host(tmp_path):
    """Keras' Normalization (EfficientNet's) reads its statistics into constants when
    built: the step never touches them, so the profile has no node for them. The
    profile lists them (the variables of the objects the step holds: fit's model and
    its optimizer), and variables_placed creates them on the host, /device:CPU:0, as
    plan.scope() does, rather than refusing them (issue 52, item 2)."""
    import keras
    from pardnn.cli import main

    def build():
        keras.utils.set_random_seed(0)
        model = keras.Sequential([keras.layers.Input((4,)), keras.layers.Normalization(mean=None),
                                  keras.layers.Dense(8, activation="relu"), keras.layers.Dense(2)])
        model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="mse")
        model.optimizer.build(model.trainable_variables)
        return model, tf.function(model.train_step)

    keras.backend.clear_session()               # Keras' names start again (outside the scopes)
    with shape_only_variables():
        _, step = build()
    doc = profile_function(step, ((tf.TensorSpec([8, 4]), tf.TensorSpec([8, 2])),), out_dir=str(tmp_path / "prof"),
                           estimate="dgx-h100")
    assert [name for name, _ in doc["untouched_variables"]] == [
        "sequential/normalization/mean:0", "sequential/normalization/variance:0", "sequential/normalization/count:0"]
    assert main(["place", str(tmp_path / "prof"), "--devices", "cpu:1", "-o", str(tmp_path / "placed")]) == 0
    keras.backend.clear_session()
    with variables_placed(str(tmp_path / "placed" / "placement.csv")):
        model, step = build()
    assert all(v.value.device.endswith("/device:CPU:0") for v in model.layers[0].weights)
    model.train_step = pardnn_placed(step, str(tmp_path / "placed" / "placement.csv"))
    x, y = tf.random.stateless_normal([8, 4], (1, 2)), tf.random.stateless_normal([8, 2], (3, 4))
    placed_loss = model.fit(x, y, batch_size=8, verbose=0).history["loss"]
    keras.backend.clear_session()
    reference, _ = build()
    assert placed_loss == reference.fit(x, y, batch_size=8, verbose=0).history["loss"]

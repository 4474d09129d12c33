"""Run by tests/test_tf2_variables.py in a subprocess (K logical CPU devices must be
set before TensorFlow initialises): a Keras model whose weights and Adam slots are
4x a per-device budget, planned without allocating it (shape-only variables,
estimated costs), placed with --memory, built with its variables where the plan
says and trained placed, in a custom loop and with model.fit; then the bad inputs.
Prints one JSON line."""

import contextlib
import csv
import json
import os
import shutil
import sys

import numpy as np

import pardnn.tf
import keras
import tensorflow as tf

from pardnn.cli import main
from pardnn.graph.node_memory import resident_bytes

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples"))
import keras_placed as example

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import keras_models

K, LAYERS, BATCH, STEPS = 8, 12, 16, 3


def custom_loop(layers=LAYERS, model_scope=contextlib.nullcontext):
    """The example's MLP (built in model_scope()), its built Adam and the example's
    tf.function training step (step.optimizer: the optimizer)."""
    with model_scope():
        model = example.mlp(layers)
    opt = keras.optimizers.Adam(1e-3)
    opt.build(model.trainable_variables)
    step = example.training_step(model, opt)
    step.optimizer = opt
    return step


def fit_model():
    """The same MLP compiled for model.fit; its train_step as a tf.function."""
    model = example.mlp()
    model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="mse")
    model.optimizer.build(model.trainable_variables)
    return model, tf.function(model.train_step)


def recording(build):
    """build() with every variable it creates recorded: (result, variables)."""
    created = []

    def record(next_creator, **kwargs):
        created.append(next_creator(**kwargs))
        return created[-1]
    with tf.variable_creator_scope(record):
        return build(), created


def nbytes(v):
    return v.shape.num_elements() * v.dtype.size


def plan(root, build, step_of, specs):
    """Plan without allocating: shape-only build, estimated profile, place and
    emulate with a budget of a quarter of the variables. Returns facts."""
    keras.backend.clear_session()                 # Keras' layer names start again
    with pardnn.tf.shape_only_variables():
        built, created = recording(build)
    total = sum(nbytes(v) for v in created)
    doc = pardnn.tf.profile_function(step_of(built), specs, out_dir=f"{root}/prof", estimate="dgx-h100")
    memory = ["--memory", str(total // 4), "--reserve", "0"]
    assert main(["place", f"{root}/prof", "--devices", f"cpu:{K}", *memory, "-o", f"{root}/placed"]) == 0
    assert main(["emulate", f"{root}/prof", "--placement", f"{root}/placed/placement.csv",
                 "--devices", f"cpu:{K}", *memory, "--report", f"{root}/emulated.json"]) == 0
    with open(f"{root}/emulated.json") as f:
        emulated = json.load(f)
    return {"variable_bytes": total, "budget": total // 4, "gathers": doc["gathers_bypassed"],
            "emulated_feasible": emulated["feasible"], "emulated_peaks": emulated["peak_memory_bytes"],
            "plan_resident": planned_resident(root)}


def planned_resident(root):
    graph, _ = pardnn.tf.load_profile(f"{root}/prof")
    device = dict(csv.reader(open(f"{root}/placed/placement.csv")))
    per = {}
    for name, size in zip(graph.names, resident_bytes(graph)):
        if size:
            per[device[name]] = per.get(device[name], 0) + int(size)
    return per


def planned_devices(root):
    """Variable name -> planned device (each name once in this model)."""
    device = dict(csv.reader(open(f"{root}/placed/placement.csv")))
    variables = json.load(open(f"{root}/placed/profile.json"))["variables"]
    assert len(set(variables.values())) == len(variables)
    return {name: device[node] for node, name in variables.items()}


def placed_build(root, build):
    """build() under variables_placed: (result, facts about where its variables went)."""
    keras.backend.clear_session()
    with pardnn.tf.variables_placed(f"{root}/placed/placement.csv"):
        built, created = recording(build)
    want = planned_devices(root)
    wrong = [v.name for v in created if v.device != want[v.name]]
    per = {}
    for v in created:
        per[v.device] = per.get(v.device, 0) + nbytes(v)
    return built, {"variables": len(created), "wrong_device": wrong, "bytes_per_device": per}


def batches():
    rng = np.random.RandomState(0)
    return [(tf.constant(rng.randn(BATCH, 64), tf.float32), tf.constant(rng.randn(BATCH, 8), tf.float32))
            for _ in range(STEPS)]


def loop_flow(root, data):
    specs = (tf.TensorSpec([BATCH, 64]), tf.TensorSpec([BATCH, 8]))
    facts = plan(root, custom_loop, lambda step: step, specs)
    step, facts["built"] = placed_build(root, custom_loop)
    fn = pardnn.tf.placed(step, f"{root}/placed/placement.csv")
    first, check = pardnn.tf.check_function_placement(fn, data[0])
    facts["placed"] = [float(first)] + [float(fn(*b)) for b in data[1:]]
    facts["moved"], facts["per_device"] = check.moved, check.nodes_per_device
    keras.backend.clear_session()
    reference = custom_loop()
    facts["unplaced"] = [float(reference(*b)) for b in data]
    return facts


def fit_losses(model, data):
    return keras_models.fit_losses(model, data, BATCH)


def fit_flow(root, data):
    specs = ((tf.TensorSpec([BATCH, 64]), tf.TensorSpec([BATCH, 8])),)
    facts = plan(root, fit_model, lambda built: built[1], specs)
    (model, step), facts["built"] = placed_build(root, fit_model)
    model.train_step = pardnn.tf.placed(step, f"{root}/placed/placement.csv")
    facts["placed"], check = pardnn.tf.check_nested_placement(model.train_step,
                                                              lambda: fit_losses(model, data))
    facts["moved"], facts["per_device"] = check.moved, check.nodes_per_device
    keras.backend.clear_session()
    facts["unplaced"] = fit_losses(fit_model()[0], data)
    return facts


def bad_inputs(root, data):
    """Each bad input's error message (None: none raised), and whether a step ran."""
    csv_path = f"{root}/placed/placement.csv"
    errors = {}

    def another_model():
        keras.backend.clear_session()
        with pardnn.tf.variables_placed(csv_path):
            custom_loop(LAYERS + 1)
    errors["another_model"] = keras_models.error_of(another_model)

    def outside_plan():                           # the optimizer's slots built outside the context
        keras.backend.clear_session()
        step = custom_loop(model_scope=lambda: pardnn.tf.variables_placed(csv_path))
        try:
            pardnn.tf.placed(step, csv_path)(*data[0])
        finally:
            errors["outside_plan_steps"] = int(step.optimizer.iterations.numpy())
    errors["outside_plan"] = keras_models.error_of(outside_plan)

    lacking = f"{root}/lacking"
    os.makedirs(lacking, exist_ok=True)
    shutil.copy(f"{root}/placed/profile.json", lacking)
    with open(csv_path) as src, open(f"{lacking}/placement.csv", "w") as dst:
        dst.write(src.read().replace(f"device:CPU:{K - 1}", f"device:CPU:{K + 1}"))
    errors["lacking_device"] = keras_models.error_of(lambda: pardnn.tf.variables_placed(f"{lacking}/placement.csv")
                                        .__enter__())

    def built_outside():
        keras.backend.clear_session()
        step = custom_loop()
        try:
            pardnn.tf.placed(step, csv_path)(*data[0])
        finally:
            errors["built_outside_steps"] = int(step.optimizer.iterations.numpy())
    errors["built_outside"] = keras_models.error_of(built_outside)
    return errors


def main_script(root):
    tf.config.set_logical_device_configuration(
        tf.config.list_physical_devices("CPU")[0], [tf.config.LogicalDeviceConfiguration()] * K)
    data = batches()
    result = {"loop": loop_flow(f"{root}/loop", data), "fit": fit_flow(f"{root}/fit", data)}
    result["bad"] = bad_inputs(f"{root}/loop", data)
    print(json.dumps(result))


if __name__ == "__main__":
    main_script(sys.argv[1])

"""Run by tests/test_tf2_function.py in a subprocess (4 logical CPU devices must be
set before TensorFlow initialises): profile a Keras model's tf.function training
step, place it on cpu:4, build it again with its variables where the placement
says, train it placed and unplaced; print one JSON line."""

import json
import os
import sys

import numpy as np

import pardnn.tf.quiet_import
import keras
import tensorflow as tf

from pardnn.cli import main
from pardnn.base.errors import UserError

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples"))
import keras_placed as example

STEPS = 3


def model_and_step(hidden):
    """A seeded two-layer Keras model, its Adam optimizer and a tf.function step."""
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.layers.Input((8,)), keras.layers.Dense(hidden, activation="relu"),
                              keras.layers.Dense(4)])
    opt = keras.optimizers.Adam(1e-2)
    opt.build(model.trainable_variables)
    return example.training_step(model, opt)


def main_script(root):
    tf.config.set_logical_device_configuration(
        tf.config.list_physical_devices("CPU")[0], [tf.config.LogicalDeviceConfiguration()] * 4)
    rng = np.random.RandomState(0)
    batches = [(tf.constant(rng.randn(4, 8), tf.float32), tf.constant(rng.randn(4, 4), tf.float32))
               for _ in range(STEPS)]
    step = model_and_step(16)
    pardnn.tf.profile_function(step, batches[0], steps=2, out_dir=f"{root}/prof")
    assert main(["place", f"{root}/prof", "--devices", "cpu:4", "--algorithm", "round-robin",
                 "-o", f"{root}/placed"]) == 0
    keras.backend.clear_session()                       # the same names again
    with pardnn.tf.variables_placed(f"{root}/placed/placement.csv"):
        step = model_and_step(16)
    fn = pardnn.tf.placed(step, f"{root}/placed/placement.csv")
    first, check = pardnn.tf.check_function_placement(fn, batches[0])
    placed_losses = [float(first)] + [float(fn(*b)) for b in batches[1:]]
    keras.backend.clear_session()
    reference = model_and_step(16)
    unplaced = [float(reference(*b)) for b in batches]

    other = model_and_step(12)                          # another model: other names
    pardnn.tf.profile_function(other, batches[0], steps=1, out_dir=f"{root}/prof2")
    assert main(["place", f"{root}/prof2", "--devices", "cpu:4", "-o", f"{root}/placed2"]) == 0
    try:
        pardnn.tf.placed(step, f"{root}/placed2/placement.csv")(*batches[0])
        mismatch = None
    except UserError as exc:
        mismatch = str(exc)
    print(json.dumps({"placed": placed_losses, "unplaced": unplaced, "moved": check.moved,
                      "per_device": check.nodes_per_device, "mismatch": mismatch}))


if __name__ == "__main__":
    main_script(sys.argv[1])

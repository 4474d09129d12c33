"""Run by tests/test_tf2_mixed_precision.py in a subprocess (3 logical CPU devices must be
set before TensorFlow initialises): a Keras model under the mixed_float16 policy, with a
LossScaleOptimizer (whose tf.cond reads every variable), trained placed on cpu:3 in two
ways, each against the same model trained unplaced:
- profiled: its step profiled as it runs;
- planned: built shape-only and costed by estimate (docs/tf2.md);
each placed at 20 KiB per device, less than its variables and their slots.
Prints one JSON line."""

import contextlib
import json
import sys

import numpy as np

import pardnn.tf.quiet_import  # (quiet TensorFlow import first)
import keras
import tensorflow as tf

import pardnn.tf
from pardnn.cli import main

DEVICES, BATCH, STEPS = 3, 8, 3
MEMORY = 20 * 1024          # bytes per device: less than the variables and slots (20,820 bytes)


def model_and_step(scope=contextlib.nullcontext):
    """A seeded mixed-precision MLP (float16 compute, float32 output layer), its Adam
    wrapped in Keras' LossScaleOptimizer, and a tf.function step that scales the loss."""
    keras.backend.clear_session()                 # the same layer names every time
    keras.utils.set_random_seed(0)
    with scope():
        keras.mixed_precision.set_dtype_policy("mixed_float16")
        model = keras.Sequential([keras.layers.Input((16,)), keras.layers.Dense(32, activation="relu"),
                                  keras.layers.Dense(32, activation="relu"),
                                  keras.layers.Dense(4, dtype="float32")])
        opt = keras.optimizers.LossScaleOptimizer(keras.optimizers.Adam(1e-2))
        opt.build(model.trainable_variables)
    keras.mixed_precision.set_dtype_policy("float32")

    @tf.function
    def step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(x, training=True) - y))
            scaled = opt.scale_loss(loss)
        grads = tape.gradient(scaled, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        return loss
    step.variables_bytes = sum(int(np.prod(v.shape)) * np.dtype(v.dtype).itemsize
                               for v in model.variables + opt.variables)
    return step


def trained(root, batches, memory):
    """Places root/prof at `memory` bytes per device, builds the model with its variables
    where the placement says and trains it placed: facts."""
    assert main(["place", f"{root}/prof", "--devices", f"cpu:{DEVICES}", "--memory", str(memory),
                 "--reserve", "0", "-o", f"{root}/placed"]) == 0
    csv = f"{root}/placed/placement.csv"
    # the LossScaleOptimizer's own `iteration` counter, which the step never reads, is
    # in no plan: it goes to the first device
    step = model_and_step(lambda: pardnn.tf.variables_placed(csv, others="/device:CPU:0"))
    fn = pardnn.tf.placed(step, csv)
    first, check = pardnn.tf.check_function_placement(fn, batches[0])
    report = json.load(open(f"{root}/placed/report.json"))
    return {"placed": [float(first)] + [float(fn(*b)) for b in batches[1:]], "moved": check.moved,
            "per_device": check.nodes_per_device, "feasible": report["feasible"],
            "peaks": report["peak_memory_bytes"], "memory": memory}


def main_script(root):
    tf.config.set_logical_device_configuration(
        tf.config.list_physical_devices("CPU")[0], [tf.config.LogicalDeviceConfiguration()] * DEVICES)
    rng = np.random.RandomState(0)
    batches = [(tf.constant(rng.randn(BATCH, 16), tf.float32), tf.constant(rng.randn(BATCH, 4), tf.float32))
               for _ in range(STEPS)]
    reference = model_and_step()
    out = {"unplaced": [float(reference(*b)) for b in batches]}
    step = model_and_step()
    pardnn.tf.profile_function(step, batches[0], steps=1, out_dir=f"{root}/profiled/prof")
    out["variables_bytes"] = step.variables_bytes
    out["profiled"] = trained(f"{root}/profiled", batches, MEMORY)
    step = model_and_step(pardnn.tf.shape_only_variables)
    specs = (tf.TensorSpec([BATCH, 16]), tf.TensorSpec([BATCH, 4]))
    pardnn.tf.profile_function(step, specs, out_dir=f"{root}/planned/prof", estimate="dgx-h100")
    out["planned"] = trained(f"{root}/planned", batches, MEMORY)
    print(json.dumps(out))


if __name__ == "__main__":
    main_script(sys.argv[1])

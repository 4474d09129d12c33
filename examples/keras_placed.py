"""A Keras model 4x too big for one device's budget, trained across 8 devices,
with the functions underneath pardnn.keras (docs/tf2.md; examples/keras_fit.py
does the same in three lines). Run it from the repository root:

    python examples/keras_placed.py [WORK_DIR]

1. Plan without allocating the model: build it under shape-only variables and
   let Grappler estimate one training step for an H100 (nothing runs).
2. Place the step on 8 devices with a memory budget of a quarter of the model's
   weights and Adam slots (`pardnn place ... --memory`).
3. Build the model again with every variable on the device the plan gives it,
   and train the placed step. Here the 8 devices are logical CPU devices of this
   process; on a machine with GPUs use `--devices gpu:8` and drop step 0.
"""

import sys

import numpy as np

import pardnn.tf
import keras
import tensorflow as tf

from pardnn.cli import main as pardnn_cli

DEVICES, BATCH = 8, 16


def mlp(layers=12):
    """A seeded Keras MLP: 64 inputs, `layers` Dense layers of 128 (dropout after
    the first two), 8 outputs."""
    keras.utils.set_random_seed(0)
    hidden = [keras.layers.Dense(128, activation="relu") for _ in range(layers)]
    hidden[1:1] = [keras.layers.Dropout(0.1)]
    hidden[3:3] = [keras.layers.Dropout(0.1)]
    return keras.Sequential([keras.layers.Input((64,))] + hidden + [keras.layers.Dense(8)])


def training_step(model, opt):
    """A tf.function training step of `model` with the optimizer `opt` (MSE loss)."""
    mse = keras.losses.MeanSquaredError()

    @tf.function
    def step(x, y):
        with tf.GradientTape() as tape:
            loss = mse(y, model(x, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        return loss
    return step


def build():
    """The model, its Adam optimizer (slots created now) and the training step."""
    model = mlp()
    opt = keras.optimizers.Adam(1e-3)
    opt.build(model.trainable_variables)
    return model, opt, training_step(model, opt)


def main(work):
    # 0. Eight logical CPU devices (before TensorFlow starts).
    tf.config.set_logical_device_configuration(
        tf.config.list_physical_devices("CPU")[0], [tf.config.LogicalDeviceConfiguration()] * DEVICES)

    # 1. Plan: shape-only variables, estimated costs.
    keras.backend.clear_session()          # Keras names layers afresh (never inside the scopes:
    with pardnn.tf.shape_only_variables():     # it drops them)
        model, opt, step = build()
    specs = (tf.TensorSpec([BATCH, 64]), tf.TensorSpec([BATCH, 8]))
    pardnn.tf.profile_function(step, specs, out_dir=f"{work}/prof", estimate="dgx-h100")
    total = sum(v.shape.num_elements() * 4 for v in model.weights + opt.variables)
    print(f"weights + Adam slots: {total / 2**20:.2f} MiB; budget per device: {total / 4 / 2**20:.2f} MiB")

    # 2. Place: the same as `pardnn place PROF --devices cpu:8 --memory BYTES --reserve 0 -o PLACED`.
    if pardnn_cli(["place", f"{work}/prof", "--devices", f"cpu:{DEVICES}", "--memory", str(total // 4),
                   "--reserve", "0", "-o", f"{work}/placed"]) != 0:
        sys.exit(2)

    # 3. Build with variables where the plan says, train placed.
    plan = f"{work}/placed/placement.csv"
    keras.backend.clear_session()          # the same variable names as in the plan
    with pardnn.tf.variables_placed(plan):
        model, opt, step = build()
    per_device = {}
    for v in model.weights + opt.variables:
        per_device[v.value.device] = per_device.get(v.value.device, 0) + v.shape.num_elements() * 4
    for device, size in sorted(per_device.items()):
        print(f"  {device}: {size / 2**10:.0f} KiB of variables")
    placed_step = pardnn.tf.placed(step, plan)
    rng = np.random.RandomState(0)
    for i in range(3):
        x, y = rng.randn(BATCH, 64).astype("float32"), rng.randn(BATCH, 8).astype("float32")
        print(f"step {i}: loss {float(placed_step(tf.constant(x), tf.constant(y))):.5f}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "keras_placed_work")

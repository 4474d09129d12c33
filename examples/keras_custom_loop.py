"""A custom training loop placed by pardnn.keras: plan once, then load the plan.

    python examples/keras_custom_loop.py [PLAN_DIR]

The first run plans the model (shape-only, estimated, placed on 8 logical CPU
devices) and writes PLAN_DIR; later runs, in other processes, load it
(pardnn.keras.load_plan) and get the same placement. The optimizer is left to
Keras to build lazily on the first step: plan.step creates its slots on the
devices the plan gives their variables.
"""

import os
import sys

import keras
import numpy as np
import tensorflow as tf

import pardnn.keras

tf.config.set_logical_device_configuration(          # 8 logical CPU devices, before TF starts
    tf.config.list_physical_devices("CPU")[0], [tf.config.LogicalDeviceConfiguration()] * 8)

PLAN = sys.argv[1] if len(sys.argv) > 1 else "keras_custom_loop_plan"


def build():
    """The model and its optimizer (ordinary Keras code)."""
    keras.utils.set_random_seed(0)
    inputs = keras.Input((64,))
    x = keras.layers.Normalization(mean=0.0, variance=1.0)(inputs)
    for _ in range(6):
        x = keras.layers.Dense(256, activation="relu")(x)
    return keras.Model(inputs, keras.layers.Dense(8)(x)), keras.optimizers.Adam(1e-3)


def train_step(model, optimizer, x, y):
    """One training step: train_step(*what build returns, *one batch)."""
    with tf.GradientTape() as tape:
        loss = keras.ops.mean(keras.ops.square(model(x, training=True) - y))
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss


rng = np.random.RandomState(0)
batches = [(rng.randn(32, 64).astype("float32"), rng.randn(32, 8).astype("float32")) for _ in range(20)]

if os.path.exists(os.path.join(PLAN, "plan.json")):
    plan = pardnn.keras.load_plan(PLAN)
else:
    plan = pardnn.keras.plan(build, batches[0], devices="cpu:8", memory="1536KiB", step=train_step,
                             directory=PLAN)
with plan.scope():
    model, optimizer = build()                        # every variable on its planned device
step = plan.step(train_step, model, optimizer)        # step(x, y): placed, slots created as planned
for i, (x, y) in enumerate(batches):
    loss = step(tf.constant(x), tf.constant(y))
    if i % 5 == 0:
        print(f"step {i}: loss {float(loss):.5f}")
devices = {v.value.device.rsplit("/", 1)[-1] for v in model.variables + optimizer.variables}
print(f"{len(model.variables + optimizer.variables)} variables on {len(devices)} devices")

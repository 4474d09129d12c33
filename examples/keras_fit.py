"""Keras in three lines: plan a model, build it placed, train it with model.fit.

The README's TF2 example. Run it from the repository root (8 logical CPU devices
stand in for a machine's GPUs; on a DGX H100 drop the device line and plan with
devices="dgx-h100", memory="auto"):

    python examples/keras_fit.py

pardnn.keras.plan builds the model shape-only, estimates one training step, places
it on 8 devices with 2 MiB each (the weights and Adam slots are 5.5 MiB) and
writes pardnn_plan/, the folder `pardnn place` writes: `pardnn emulate
pardnn_plan/profile --placement pardnn_plan/placement.csv --devices cpu:8 --memory
2MiB` and `tensorboard --logdir pardnn_plan/tensorboard` read it.
"""

import keras
import numpy as np
import tensorflow as tf

import pardnn.keras

tf.config.set_logical_device_configuration(          # 8 logical CPU devices, before TF starts
    tf.config.list_physical_devices("CPU")[0], [tf.config.LogicalDeviceConfiguration()] * 8)


def build():                                          # ordinary Keras code
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((64,))]
                             + [keras.layers.Dense(256, activation="relu") for _ in range(8)]
                             + [keras.layers.Dense(8)])
    model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="mse")
    return model


x = np.random.RandomState(0).randn(512, 64).astype("float32")
y = np.random.RandomState(1).randn(512, 8).astype("float32")

plan = pardnn.keras.plan(build, (x[:32], y[:32]), devices="cpu:8", memory="2MiB")
with plan.scope():
    model = build()                                   # every variable on its planned device
model.fit(x, y, batch_size=32, epochs=2, verbose=2)   # the placed train_step

"""Run by tests/test_keras_apps.py in a subprocess (K logical CPU devices must be set
before TensorFlow initialises): one model of keras.applications or keras_hub, built
with weights=None and a small input, through the README's three lines, as a user's
script runs them (an unplaced copy built and trained first, no clear_session). Prints
one JSON line.

    keras_apps_script.py NAME ROOT

`pardnn.keras.plan` on cpu:4 at half the bytes of the model's weights and Adam slots
per device, the model built in `plan.scope()`, `fit` for STEPS steps: where its ops
ran against where they were placed, the losses against the unplaced copy's, and the
devices its variables were created on.
"""

import json
import os
import sys

import numpy as np

import pardnn.keras
import keras
import tensorflow as tf

from pardnn.tf import check_nested_placement
from pardnn.tf.function import relaxed_batch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import keras_models as km

K, BATCH, STEPS, CLASSES = 4, 8, 2, 4
IMAGE = (32, 32, 3)
VOCABULARY = 256


def compiled(model):
    model.compile(optimizer=keras.optimizers.Adam(1e-3), loss=keras.losses.SparseCategoricalCrossentropy())
    return model


def convnext():
    """Depthwise (grouped) convolutions Keras compiles with XLA on a CPU, LayerNormalization,
    layer scale; the ConvNeXt the issue trained."""
    return keras.applications.ConvNeXtTiny(weights=None, input_shape=IMAGE, classes=CLASSES)


def convnext_stochastic_depth():
    """ConvNeXt with stochastic depth (random ops given no seed), at a small width and
    depth: keras.applications' ConvNeXt builder, which ConvNeXtTiny calls with none."""
    from keras.src.applications.convnext import ConvNeXt
    return ConvNeXt(depths=[1, 1, 2, 1], projection_dims=[16, 32, 64, 128], drop_path_rate=0.2, weights=None,
                    input_shape=IMAGE, classes=CLASSES, name="convnext_sd")


def efficientnet():
    """Rescaling and a Normalization that reads its statistics into constants when built,
    depthwise convolutions, squeeze-and-excitation, Dropout."""
    return keras.applications.EfficientNetB0(weights=None, input_shape=IMAGE, classes=CLASSES)


def mobilenet_v3():
    """Hard-swish, squeeze-and-excitation, depthwise convolutions, BatchNormalization."""
    return keras.applications.MobileNetV3Small(weights=None, input_shape=IMAGE, classes=CLASSES)


def densenet():
    """121 layers of dense blocks: every block concatenates all earlier feature maps."""
    return keras.applications.DenseNet121(weights=None, input_shape=IMAGE, classes=CLASSES)


def dict_inputs():
    """A functional model of two named inputs (an image and a feature vector), given as a
    dict: the structure of a keras_hub backbone's inputs, without keras_hub."""
    image = keras.Input((8, 8, 3), name="image")
    features = keras.Input((10,), name="features")
    x = keras.layers.Conv2D(16, 3, activation="relu")(image)
    x = keras.layers.GlobalAveragePooling2D()(keras.layers.BatchNormalization()(x))
    y = features
    for _ in range(8):
        y = keras.layers.Dense(64, activation="relu")(y)
    z = keras.layers.Dense(CLASSES, activation="softmax")(keras.layers.Concatenate()([x, y]))
    return keras.Model({"image": image, "features": features}, z)


def bert():
    """keras_hub's BertBackbone (token, segment and position embeddings, transformer
    encoder blocks, a pooled output), small, its dict inputs token_ids, segment_ids and
    padding_mask, with a classifier head."""
    import keras_hub
    backbone = keras_hub.models.BertBackbone(vocabulary_size=VOCABULARY, num_layers=4, num_heads=2, hidden_dim=64,
                                             intermediate_dim=128, max_sequence_length=12)
    head = keras.layers.Dense(CLASSES, activation="softmax")(backbone.output["pooled_output"])
    return keras.Model(backbone.input, head)


MODELS = {"convnext": convnext, "convnext_stochastic_depth": convnext_stochastic_depth,
          "efficientnet": efficientnet, "mobilenet_v3": mobilenet_v3, "densenet": densenet,
          "dict_inputs": dict_inputs, "bert": bert}


def batch(name, rng):
    """One batch of BATCH samples for the model called name: (x, y)."""
    y = rng.randint(0, CLASSES, BATCH).astype(np.int32)
    if name == "dict_inputs":
        return {"image": rng.rand(BATCH, 8, 8, 3).astype(np.float32),
                "features": rng.randn(BATCH, 10).astype(np.float32)}, y
    if name == "bert":
        tokens = rng.randint(1, VOCABULARY, (BATCH, 12)).astype(np.int32)
        mask = np.arange(12)[None, :] < rng.randint(4, 13, (BATCH, 1))
        return {"token_ids": tokens * mask, "segment_ids": np.zeros((BATCH, 12), np.int32),
                "padding_mask": mask.astype(np.int32)}, y
    return (rng.rand(BATCH, *IMAGE) * 255).astype(np.float32), y


def nbytes(variables):
    return sum(v.shape.num_elements() * v.dtype.size for v in variables)


def main_script(name, root):
    tf.config.set_logical_device_configuration(
        tf.config.list_physical_devices("CPU")[0], [tf.config.LogicalDeviceConfiguration()] * K)

    def build():
        keras.utils.set_random_seed(0)
        return compiled(MODELS[name]())

    rng = np.random.RandomState(0)
    data = [batch(name, rng) for _ in range(STEPS)]
    unplaced = build()                  # first, as a user's script: Keras' counters move on
    # traced as the placed step is, for any batch size: what differs is placement alone, not
    # the kernels oneDNN picks for a known batch size (docs/tf2.md, "Drift")
    unplaced.train_step = tf.function(unplaced.train_step, input_signature=[relaxed_batch(km.specs(data[0]))])
    unplaced_losses = km.fit_losses(unplaced, data, BATCH)
    state = [v.value for v in unplaced.weights + unplaced.optimizer.variables]
    memory = nbytes(state) // 2         # half the bytes of weights and Adam slots, per device
    plan = pardnn.keras.plan(build, km.specs(data[0]), devices=f"cpu:{K}", memory=memory, reserve=0,
                             directory=os.path.join(root, name), verbose=0)
    with plan.scope():
        model = build()
    losses, check = check_nested_placement(model.train_step, lambda: km.fit_losses(model, data, BATCH))
    placed_state = [v.value for v in model.weights + model.optimizer.variables]
    report = plan.report
    print(json.dumps({"model": name, "params": int(unplaced.count_params()), "state_bytes": nbytes(state),
                      "memory": memory, "nodes": report.get("num_nodes"), "fits": report.get("feasible"),
                      "placed": losses, "unplaced": unplaced_losses, "moved": check.moved,
                      "per_device": check.nodes_per_device, "variables": len(placed_state),
                      "variable_devices": sorted({v.device for v in placed_state})}))


if __name__ == "__main__":
    main_script(*sys.argv[1:])

"""Keras models for the memory benchmarks (tools/bench_largest.py, tools/bench_least_memory.py):
a GPT-style decoder, a stack of transformer encoder blocks, and a residual CNN with
BatchNormalization, each with an Adam training step as a tf.function, and
`plan(...)`, which profiles one with pardnn.tf (shape-only and estimated, or run on
this CPU).

Only scripts import this module (TensorFlow is imported here, not in pardnn/).
"""

from __future__ import annotations

import pardnn.tf
import keras
import tensorflow as tf


class Block(keras.layers.Layer):
    """A pre-norm transformer block: x + attention(norm(x)), then x + mlp(norm(x));
    causal attention for a decoder."""

    def __init__(self, d, heads, causal, ff=4, **kw):
        super().__init__(**kw)
        self.causal = causal
        self.norm1, self.norm2 = keras.layers.LayerNormalization(), keras.layers.LayerNormalization()
        self.attention = keras.layers.MultiHeadAttention(heads, d // heads)
        self.up, self.down = keras.layers.Dense(ff * d, activation="gelu"), keras.layers.Dense(d)

    def call(self, x):
        h = self.norm1(x)
        x = x + self.attention(h, h, use_causal_mask=self.causal)
        return x + self.down(self.up(self.norm2(x)))


class Positions(keras.layers.Layer):
    """Adds a learned embedding of each position to a sequence of vectors."""

    def build(self, shape):
        self.table = self.add_weight(shape=tuple(shape[1:]), initializer="random_normal", name="positions")

    def call(self, x):
        return x + self.table[None]


def gpt(layers, d=4096, heads=32, seq=1024, vocab=32000):
    """A GPT-style decoder: token and position embeddings, `layers` causal blocks,
    a final LayerNorm and the vocabulary projection; parameters: about 12 d^2 per
    block and 2 vocab d + seq d besides."""
    tokens = keras.layers.Input((seq,), dtype="int32")
    x = Positions()(keras.layers.Embedding(vocab, d)(tokens))
    for _ in range(layers):
        x = Block(d, heads, causal=True)(x)
    logits = keras.layers.Dense(vocab)(keras.layers.LayerNormalization()(x))
    return keras.Model(tokens, logits)


def encoder_stack(layers=4, d=64, heads=4, seq=32, classes=10):
    """A stack of transformer encoder blocks over a sequence of vectors, pooled and
    classified."""
    inputs = keras.layers.Input((seq, d))
    x = inputs
    for _ in range(layers):
        x = Block(d, heads, causal=False)(x)
    x = keras.layers.GlobalAveragePooling1D()(keras.layers.LayerNormalization()(x))
    return keras.Model(inputs, keras.layers.Dense(classes)(x))


def residual_cnn(blocks=3, width=16, image=32, classes=10):
    """A residual CNN: a stem convolution, then `blocks` pairs of 3x3 convolutions
    with BatchNormalization and an identity shortcut, pooled and classified."""
    inputs = keras.layers.Input((image, image, 3))
    x = keras.layers.Conv2D(width, 3, padding="same")(inputs)
    for _ in range(blocks):
        h = keras.layers.Conv2D(width, 3, padding="same")(keras.layers.ReLU()(keras.layers.BatchNormalization()(x)))
        h = keras.layers.Conv2D(width, 3, padding="same")(keras.layers.ReLU()(keras.layers.BatchNormalization()(h)))
        x = x + h
    x = keras.layers.GlobalAveragePooling2D()(x)
    return keras.Model(inputs, keras.layers.Dense(classes)(x))


def training_step(model, opt, loss):
    """A tf.function training step of `model` under `loss` with the optimizer `opt`."""
    @tf.function
    def step(x, y):
        with tf.GradientTape() as tape:
            value = loss(y, model(x, training=True))
        grads = tape.gradient(value, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        return value
    return step


def custom_step(model, optimizer, x, y):
    """One step of a custom training loop, as `pardnn.keras.plan(step=)` takes it:
    sparse cross-entropy on the logits, then the optimizer's update."""
    with tf.GradientTape() as tape:
        loss = keras.ops.mean(keras.losses.sparse_categorical_crossentropy(y, model(x, training=True),
                                                                         from_logits=True))
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss


def built(make):
    """(model, Adam with its slots, step) for `make()`, classification by sparse
    cross-entropy on logits."""
    keras.utils.set_random_seed(0)
    model = make()
    opt = keras.optimizers.Adam(1e-4)
    opt.build(model.trainable_variables)
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    return model, opt, training_step(model, opt, loss)


def _example(spec, model):
    """A seeded batch for `spec`: normal floats, or class labels below the model's
    output width for integers."""
    gen = tf.random.Generator.from_seed(0)
    if spec.dtype.is_integer:
        return gen.uniform(spec.shape, 0, int(model.output_shape[-1]), dtype=spec.dtype)
    return gen.normal(spec.shape, dtype=spec.dtype)


def parameters(model) -> int:
    return int(sum(v.shape.num_elements() for v in model.trainable_variables))


def plan(make, specs, out_dir, estimate=None, steps=3):
    """Profile `make()`'s training step into `out_dir`: shape-only variables and
    Grappler's estimate for `estimate` (a GPU preset), or, without one, built and
    run on this CPU. Returns (model, profile.json's contents)."""
    keras.backend.clear_session()
    if estimate is None:
        model, opt, step = built(make)
        args = tuple(_example(spec, model) for spec in specs)
        return model, pardnn.tf.profile_function(step, args, steps=steps, out_dir=out_dir)
    with pardnn.tf.shape_only_variables():
        model, opt, step = built(make)
    return model, pardnn.tf.profile_function(step, specs, out_dir=out_dir, estimate=estimate)

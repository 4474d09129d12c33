"""Keras models of different structure for the pardnn.keras tests, each a seeded
`build()` with one batch of data:

- resnet: a residual CNN (Conv2D, BatchNormalization, Add skips), compiled for fit;
- transformer: token and position embeddings, two blocks of causal self-attention
  with a padding mask (a custom layer holding MultiHeadAttention), for fit;
- siamese: two inputs through one shared encoder (a nested Sequential), two outputs
  with their own losses and metrics, dict inputs and outputs, RMSprop, for fit;
- normalized: Normalization, a custom layer reading its own variable in build(),
  and Dense layers, with Adam for a custom training loop (`train_step`).
"""

import numpy as np

import keras
import tensorflow as tf
from keras import layers


def resnet(classes=10, extra=None):
    """The residual CNN; `classes` outputs, `extra` "dense" or "relu" adds such a layer
    before the output (another model than the planned one, for the bad-input tests)."""
    keras.utils.set_random_seed(1)
    images = keras.Input((12, 12, 3))
    x = layers.ReLU()(layers.BatchNormalization()(layers.Conv2D(16, 3, padding="same")(images)))
    for _ in range(2):
        y = layers.ReLU()(layers.BatchNormalization()(layers.Conv2D(16, 3, padding="same")(x)))
        y = layers.BatchNormalization()(layers.Conv2D(16, 3, padding="same")(y))
        x = layers.ReLU()(layers.Add()([x, y]))
    x = layers.GlobalAveragePooling2D()(x)
    x = {"dense": layers.Dense(16), "relu": layers.ReLU(), None: lambda t: t}[extra](x)
    logits = layers.Dense(classes)(x)
    model = keras.Model(images, logits, name="resnet")
    model.compile(optimizer=keras.optimizers.Adam(1e-3), metrics=["accuracy"],
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def resnet_batch(rng, n):
    return rng.randn(n, 12, 12, 3).astype("float32"), rng.randint(0, 10, n).astype("int32")


VOCAB, SEQ, DIM = 48, 10, 32


class PositionEmbedding(layers.Layer):
    """A learned position table added to the token embeddings."""

    def build(self, shape):
        self.table = self.add_weight(shape=(shape[-2], shape[-1]), initializer="glorot_uniform", name="table")

    def call(self, x):
        return x + self.table


class Block(layers.Layer):
    """Causal self-attention masked at padding tokens, then a feed-forward layer."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.attention = layers.MultiHeadAttention(num_heads=4, key_dim=DIM // 4)
        self.norm1, self.norm2 = layers.LayerNormalization(), layers.LayerNormalization()
        self.hidden, self.out = layers.Dense(2 * DIM, activation="relu"), layers.Dense(DIM)

    def call(self, x, padding):
        mask = keras.ops.logical_and(padding[:, None, :], padding[:, :, None])
        x = self.norm1(x + self.attention(x, x, attention_mask=mask, use_causal_mask=True))
        return self.norm2(x + self.out(self.hidden(x)))


def transformer():
    keras.utils.set_random_seed(2)
    tokens = keras.Input((SEQ,), dtype="int32", name="tokens")
    padding = keras.ops.not_equal(tokens, 0)
    x = PositionEmbedding()(layers.Embedding(VOCAB, DIM)(tokens))
    for _ in range(2):
        x = Block()(x, padding)
    model = keras.Model(tokens, layers.Dense(VOCAB)(x), name="transformer")
    model.compile(optimizer=keras.optimizers.SGD(0.05, momentum=0.9),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def transformer_batch(rng, n):
    tokens = rng.randint(1, VOCAB, (n, SEQ + 1)).astype("int32")
    tokens[:, -3:] *= rng.randint(0, 2, (n, 1)).astype("int32")        # some sequences padded at the end
    return tokens[:, :-1], tokens[:, 1:]


def siamese():
    keras.utils.set_random_seed(3)
    a, b = keras.Input((20,), name="a"), keras.Input((20,), name="b")
    encoder = keras.Sequential([layers.Dense(32, activation="relu"), layers.Dropout(0.1),
                                layers.Dense(16)], name="encoder")
    ea, eb = encoder(a), encoder(b)                                      # one encoder, shared
    h = layers.Dense(32, activation="relu")(layers.Concatenate()([ea, eb, layers.Subtract()([ea, eb])]))
    model = keras.Model({"a": a, "b": b}, {"score": layers.Dense(1, name="score")(h),
                                           "kind": layers.Dense(3, name="kind")(h)}, name="siamese")
    model.compile(optimizer=keras.optimizers.RMSprop(1e-3),
                  loss={"score": "mse", "kind": keras.losses.SparseCategoricalCrossentropy(from_logits=True)},
                  loss_weights={"score": 1.0, "kind": 0.5}, metrics={"kind": ["accuracy"]})
    return model


def siamese_batch(rng, n):
    x = {"a": rng.randn(n, 20).astype("float32"), "b": rng.randn(n, 20).astype("float32")}
    return x, {"score": rng.randn(n, 1).astype("float32"), "kind": rng.randint(0, 3, n).astype("int32")}


class ReadsInBuild(layers.Layer):
    """Scales by a weight, normalised by that weight's sum read when built."""

    def build(self, shape):
        self.scale = self.add_weight(shape=(shape[-1],), initializer="ones", name="scale")
        self.total = float(keras.ops.sum(self.scale))           # reads its own variable

    def call(self, x):
        return x * self.scale / self.total


def normalized():
    keras.utils.set_random_seed(4)
    inputs = keras.Input((24,))
    x = ReadsInBuild()(layers.Normalization(mean=0.5, variance=4.0)(inputs))
    x = ReadsInBuild()(layers.Normalization()(x))
    for _ in range(3):
        x = layers.Dense(64, activation="relu")(x)
    return keras.Model(inputs, layers.Dense(4)(x), name="normalized"), keras.optimizers.Adam(1e-3)


def train_step(model, optimizer, x, y):
    """One step of a custom training loop (MSE)."""
    with tf.GradientTape() as tape:
        loss = keras.ops.mean(keras.ops.square(model(x, training=True) - y))
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss


def normalized_batch(rng, n):
    return rng.randn(n, 24).astype("float32"), rng.randn(n, 4).astype("float32")


MODELS = {"resnet": (resnet, resnet_batch), "transformer": (transformer, transformer_batch),
          "siamese": (siamese, siamese_batch), "normalized": (normalized, normalized_batch)}


class Losses(keras.callbacks.Callback):
    """Records fit's loss after each batch."""

    def __init__(self):
        super().__init__()
        self.losses = []

    def on_train_batch_end(self, batch, logs=None):
        self.losses.append(float(logs["loss"]))


def fit_losses(model, data, batch_size):
    """Per-batch losses of one epoch of fit over `data` (a list of (x, y) batches:
    arrays, tensors, or dicts of them), in order."""
    x = tf.nest.map_structure(lambda *a: np.concatenate(a), *[b[0] for b in data])
    y = tf.nest.map_structure(lambda *a: np.concatenate(a), *[b[1] for b in data])
    losses = Losses()
    model.fit(x, y, batch_size=batch_size, epochs=1, shuffle=False, verbose=0, callbacks=[losses])
    return losses.losses


def error_of(action):
    """The message of the pardnn UserError action() raises; None if it raises none."""
    from pardnn.base.errors import UserError
    try:
        action()
    except UserError as exc:
        return str(exc)
    return None


def specs(batch):
    """tf.TensorSpecs of a batch (the structure kept)."""
    return tf.nest.map_structure(lambda a: tf.TensorSpec(a.shape, tf.as_dtype(a.dtype)), batch)


def batches(name, n_batches, size, seed=0):
    rng = np.random.RandomState(seed)
    return [MODELS[name][1](rng, size) for _ in range(n_batches)]


def placed_and_unplaced(plan, build, reference, data, custom, batch_size):
    """The model built in `plan`'s scope from `reference`'s weights (the same start,
    whatever Keras' seeds did), trained on `data` placed (with the plan's step for a
    `custom` loop, else fit) and `reference` unplaced: (built, the placed step
    function, placed losses, unplaced losses, the placement check of its first call)."""
    from pardnn.tf import check_function_placement, check_nested_placement
    with plan.scope():
        built = build()
    built = built if isinstance(built, tuple) else (built,)
    for mine, theirs in zip(built[0].weights, reference[0].weights if custom else reference.weights):
        mine.assign(theirs)
    if custom:
        step = plan.step(train_step, *built)
        first, check = check_function_placement(step, data[0])
        placed = [float(first)] + [float(step(*b)) for b in data[1:]]
        ref_step = tf.function(lambda x, y: train_step(*reference, x, y))
        return built, step, placed, [float(ref_step(*b)) for b in data], check
    placed, check = check_nested_placement(built[0].train_step, lambda: fit_losses(built[0], data, batch_size))
    return built, built[0].train_step, placed, fit_losses(reference, data, batch_size), check

"""A GPT-style Keras model and its training step, for planning shape-only
(tools/bench_offload.py) and for tests.

Decoder blocks of pre-norm causal self-attention and a 4x MLP with GELU, over token and
position embeddings, an untied output layer, cross-entropy on the next token, Adam in
float32. The sequence is the step's only batch (batch 1), so every tensor is [seq, d]
and every projection a plain MatMul. Parameters: layers x (12 d^2 + 13 d) + 2 vocab x d
+ seq x d + vocab + 2 d.

Adam is TensorFlow's fused update, one `ResourceApplyAdam` per variable (`FusedAdam`),
as `tf.compat.v1.train.AdamOptimizer` runs it and as ZeRO-Offload's CPU Adam is one
kernel: the variable, its two slots and its update are then one colocation group, the
unit an offload moves. (Keras 3's Adam writes about twenty element-wise ops per
variable, each with a temporary the size of the variable: a graph five times larger.)
"""

from __future__ import annotations

import keras
import tensorflow as tf


class Block(keras.layers.Layer):
    """One pre-norm decoder block on a [seq, d] sequence."""

    def __init__(self, d, heads, **kwargs):
        super().__init__(**kwargs)
        self.d, self.heads = d, heads
        self.norm1, self.norm2 = keras.layers.LayerNormalization(), keras.layers.LayerNormalization()
        self.qkv, self.out = keras.layers.Dense(3 * d), keras.layers.Dense(d)
        self.up, self.down = keras.layers.Dense(4 * d, activation="gelu"), keras.layers.Dense(d)

    def build(self, shape):
        for layer, width in ((self.norm1, self.d), (self.qkv, self.d), (self.out, self.d),
                             (self.norm2, self.d), (self.up, self.d), (self.down, 4 * self.d)):
            layer.build((shape[0], width))

    def call(self, x):
        seq, dh = tf.shape(x)[0], self.d // self.heads
        q, k, v = tf.split(self.qkv(self.norm1(x)), 3, axis=-1)
        q, k, v = (tf.transpose(tf.reshape(t, [seq, self.heads, dh]), [1, 0, 2]) for t in (q, k, v))
        scores = tf.matmul(q, k, transpose_b=True) / dh ** 0.5
        causal = tf.linalg.band_part(tf.ones([seq, seq]), -1, 0)
        weights = tf.nn.softmax(scores + (1.0 - causal) * -1e9)
        attended = tf.reshape(tf.transpose(tf.matmul(weights, v), [1, 0, 2]), [seq, self.d])
        x = x + self.out(attended)
        return x + self.down(self.up(self.norm2(x)))


class GPT(keras.Model):
    """Token and position embeddings, `layers` Blocks, a final norm and an untied head."""

    def __init__(self, layers, d=4096, heads=32, seq=1024, vocab=32768, **kwargs):
        super().__init__(**kwargs)
        self.seq, self.d = seq, d
        self.tokens = keras.layers.Embedding(vocab, d)
        self.positions = keras.layers.Embedding(seq, d)
        self.blocks = [Block(d, heads) for _ in range(layers)]
        self.norm, self.head = keras.layers.LayerNormalization(), keras.layers.Dense(vocab)

    def build(self, shape):
        self.tokens.build((self.seq,))
        self.positions.build((self.seq,))
        for block in self.blocks:
            block.build((self.seq, self.d))
        self.norm.build((self.seq, self.d))
        self.head.build((self.seq, self.d))

    def call(self, tokens):
        x = self.tokens(tokens) + self.positions(tf.range(self.seq))
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


class FusedAdam:
    """Adam over `variables` with one ResourceApplyAdam op per variable: the slots m and
    v are variables created beside each (`<name>_m`, `<name>_v`, initial values given as
    functions, so that shape-only variables trace them without running them), and an
    `iterations` counter gives the bias corrections."""

    def __init__(self, variables, lr=1e-4, beta1=0.9, beta2=0.999, epsilon=1e-7):
        self.lr, self.beta1, self.beta2, self.epsilon = lr, beta1, beta2, epsilon
        self.iterations = tf.Variable(lambda: tf.zeros([], tf.float32), name="adam_iterations")
        self.slots = [tuple(tf.Variable(lambda v=v: tf.zeros(v.shape, v.dtype), name=f"{_plain(v)}_{s}")
                            for s in ("m", "v")) for v in variables]

    @property
    def variables(self) -> list:
        return [self.iterations] + [s for pair in self.slots for s in pair]

    def apply(self, grads, variables):
        t = self.iterations.assign_add(1.0)
        b1_power, b2_power = self.beta1 ** t, self.beta2 ** t
        graph = tf.compat.v1.get_default_graph()
        for g, var, (m, v) in zip(grads, variables, self.slots):
            var = var.value if isinstance(var, keras.Variable) else var       # Keras' tf.Variable
            for used in (var, m, v):        # raw ops take handles: say the step uses these variables
                graph.watch_variable(used)
            tf.raw_ops.ResourceApplyAdam(var=var.handle, m=m.handle, v=v.handle, beta1_power=b1_power,
                                         beta2_power=b2_power, lr=self.lr, beta1=self.beta1, beta2=self.beta2,
                                         epsilon=self.epsilon, grad=g)


def _plain(variable) -> str:
    """A variable's path as a name of its own (Keras paths hold slashes)."""
    return variable.path.replace("/", "_") if hasattr(variable, "path") else variable.name.split(":")[0]


def parameters(layers, d=4096, seq=1024, vocab=32768) -> int:
    """The model's parameter count (the module docstring's formula)."""
    return layers * (12 * d * d + 13 * d) + 2 * vocab * d + seq * d + vocab + 2 * d


def build(layers, d=4096, heads=32, seq=1024, vocab=32768, seed=0):
    """(model, optimizer, step): the GPT, its FusedAdam (slots created now) and a
    tf.function training step step(tokens, labels) -> loss on int32 [seq] tensors."""
    keras.utils.set_random_seed(seed)
    model = GPT(layers, d, heads, seq, vocab)
    model.build((seq,))
    opt = FusedAdam(model.trainable_variables)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    @tf.function
    def step(tokens, labels):
        with tf.GradientTape() as tape:
            loss = loss_fn(labels, model(tokens))
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply(grads, model.trainable_variables)
        return loss
    return model, opt, step

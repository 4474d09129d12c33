"""Layers shared by the built-in model families (TF1-style graph mode, no Keras).

Every family builds its training graph inside `training_graph(seed)`, makes its
variables with `weight`, and ends with `finish` (loss, gradients, optimizer,
init). Variables are resource variables (VarHandleOp + ReadVariableOp), the kind
TF 2.x creates in graph mode. All randomness is seeded: the graph-level seed set here fixes the
initialisers and any in-graph random ops, and the feed functions draw from
`rng(seed, step)`, so two builds with the same knobs train identically.
"""

from __future__ import annotations

import contextlib

import numpy as np
import tensorflow as tf

from pardnn.base.errors import UserError
from pardnn.models import Model

v1 = tf.compat.v1

_INITS = {
    "glorot": v1.glorot_uniform_initializer,
    "zeros": v1.zeros_initializer,
    "ones": v1.ones_initializer,
}


def require_positive(**knobs) -> None:
    """UserError naming the first integer knob below 1 (sizes, counts, lengths)."""
    for name, value in knobs.items():
        if value < 1:
            raise UserError(f"--set: knob {name!r} must be at least 1, got {value}")


def require_fraction(**knobs) -> None:
    """UserError naming the first knob outside [0, 1) (dropout rates, smoothing)."""
    for name, value in knobs.items():
        if not 0 <= value < 1:
            raise UserError(f"--set: knob {name!r} must be in [0, 1), got {value}")


@contextlib.contextmanager
def training_graph(seed: int):
    """A fresh tf.Graph made the default, with its graph-level seed set."""
    if seed < 0:
        raise UserError(f"--set: knob 'seed' must be at least 0, got {seed}")
    graph = tf.Graph()
    with graph.as_default():
        v1.set_random_seed(seed)
        yield graph


def rng(seed: int, step: int) -> np.random.Generator:
    """The numpy generator a feed function uses for `step` (independent per step)."""
    return np.random.default_rng([seed, step])


def weight(name: str, shape, init: str = "glorot", trainable: bool = True):
    """A float32 resource variable in the current variable scope."""
    return v1.get_variable(name, shape, tf.float32, initializer=_INITS[init](),
                           trainable=trainable, use_resource=True)


def dense(x, units: int, name: str, activation=None):
    """x @ W + b for a rank-2 x (the projection every family uses)."""
    with v1.variable_scope(name):
        w = weight("kernel", [x.shape[-1], units])
        b = weight("bias", [units], "zeros")
    y = tf.nn.bias_add(tf.matmul(x, w), b)
    return y if activation is None else activation(y)


def lstm_step(x, h, c, kernel, bias, forget_bias: float = 1.0):
    """One step of the basic LSTM cell (Zaremba et al. 2014), gates fused in one matmul.

    kernel is [inputs + hidden, 4 * hidden]; gate order i, j, f, o as in TF's
    BasicLSTMCell. Returns (new_h, new_c)."""
    gates = tf.nn.bias_add(tf.matmul(tf.concat([x, h], 1), kernel), bias)
    i, j, f, o = tf.split(gates, 4, axis=1)
    new_c = c * tf.sigmoid(f + forget_bias) + tf.sigmoid(i) * tf.tanh(j)
    return tf.tanh(new_c) * tf.sigmoid(o), new_c


def layer_norm(x, name: str, begin_axis: int = -1, epsilon: float = 1e-5):
    """Layer normalisation (Ba et al. 2016) over the axes from begin_axis on.

    Gain and bias are per channel (last axis), as tf.contrib.layers.layer_norm had them."""
    with v1.variable_scope(name):
        gamma = weight("gamma", [x.shape[-1]], "ones")
        beta = weight("beta", [x.shape[-1]], "zeros")
    axes = list(range(begin_axis % x.shape.rank, x.shape.rank))
    mean, variance = tf.nn.moments(x, axes, keepdims=True)
    return tf.nn.batch_normalization(x, mean, variance, beta, gamma, epsilon)


def batch_norm(x, name: str, decay: float = 0.9, epsilon: float = 1e-5):
    """Training-mode batch normalisation over all but the last axis (Ioffe & Szegedy 2015).

    Unfused (moments + normalise), as TF1 models commonly built it, so its pieces
    are separate nodes for the placer. The moving mean/variance updates join
    UPDATE_OPS, which `finish` runs with every step."""
    channels = x.shape[-1]
    with v1.variable_scope(name):
        gamma = weight("gamma", [channels], "ones")
        beta = weight("beta", [channels], "zeros")
        moving_mean = weight("moving_mean", [channels], "zeros", trainable=False)
        moving_var = weight("moving_variance", [channels], "ones", trainable=False)
    mean, variance = tf.nn.moments(x, list(range(x.shape.rank - 1)))
    for moving, value in ((moving_mean, mean), (moving_var, variance)):
        update = moving.assign_sub((moving - value) * (1.0 - decay), read_value=False)
        v1.add_to_collection(v1.GraphKeys.UPDATE_OPS, update)
    return tf.nn.batch_normalization(x, mean, variance, beta, gamma, epsilon)


def dropout(x, rate: float):
    """Inverted dropout with a seeded in-graph mask; the identity when rate is 0."""
    return x if rate <= 0 else tf.nn.dropout(x, rate=rate)


def finish(graph, loss, optimizer, feed, seed: int, clip_norm: float = 0.0,
           global_step=None) -> Model:
    """Name the loss "loss:0", add the training step and an "init" op; the Model record.

    Gradients of the loss are optionally clipped by global norm, then applied by
    optimizer; the step also runs the UPDATE_OPS collection (batch-norm
    statistics), so one run of "train_op" is one full training step and
    increments global_step when one is given (for learning-rate schedules)."""
    with graph.as_default():
        loss = tf.identity(loss, name="loss")
        params = v1.trainable_variables()
        grads = v1.gradients(loss, params)
        if clip_norm > 0:
            grads, _ = tf.clip_by_global_norm(grads, clip_norm)
        with tf.control_dependencies(v1.get_collection(v1.GraphKeys.UPDATE_OPS)):
            train_op = optimizer.apply_gradients(list(zip(grads, params)), global_step, name="train_op")
        init = v1.global_variables_initializer()
    return Model(graph=graph, train_op=train_op.name, loss=loss.name, init=init.name,
                 feed=feed, seed=seed)


def markov_tokens(seed: int, step: int, batch: int, length: int, vocab: int) -> np.ndarray:
    """[batch, length] int32 token ids from a fixed, learnable Markov chain.

    Each token follows its predecessor by t -> (5t + 3) mod vocab nine times in ten
    and is uniform otherwise, so a language model's loss can fall well below
    log(vocab) in a few steps; a stand-in for the thesis' text corpora."""
    gen = rng(seed, step)
    tokens = np.empty((batch, length), np.int32)
    tokens[:, 0] = gen.integers(0, vocab, batch)
    jump = gen.random((batch, length)) < 0.1
    noise = gen.integers(0, vocab, (batch, length))
    for t in range(1, length):
        tokens[:, t] = np.where(jump[:, t], noise[:, t], (5 * tokens[:, t - 1] + 3) % vocab)
    return tokens


def labelled_images(seed: int, step: int, batch: int, shape, classes: int):
    """(images [batch, *shape] float32, labels [batch] int32): a class prototype plus noise.

    The prototypes depend on the seed only, so a classifier can learn them; a
    stand-in for the thesis' CIFAR-100."""
    prototypes = np.random.default_rng([seed]).standard_normal((classes, *shape))
    gen = rng(seed, step)
    labels = gen.integers(0, classes, batch).astype(np.int32)
    noise = gen.standard_normal((batch, *shape))
    return (prototypes[labels] + 0.5 * noise).astype(np.float32), labels

"""`mlp`: a multi-layer perceptron classifier trained with Adam — the smallest real
training graph, used by the walking skeleton and the end-to-end tests.

A TF1-style graph (tf.compat.v1 and tf.nn, no Keras) in a fresh tf.Graph: placeholders
`x` and `y`, `layers` hidden ReLU layers of width `hidden` over resource variables,
softmax cross-entropy named `loss`, `tf.compat.v1.train.AdamOptimizer` step named
`train`, initialiser named `init`. The data are synthetic and learnable: inputs are
standard normal from numpy RandomState(seed + step), labels are the argmax of a fixed
random linear "teacher" drawn from RandomState(seed), so the loss falls as it trains.
The graph-level seed is `seed`; every op used is deterministic on CPU.
"""

import numpy as np
import tensorflow as tf

from pardnn.base.errors import UserError
from pardnn.models import Model

DESCRIPTION = "multi-layer perceptron, softmax cross-entropy, Adam"
KNOBS = {"layers": 2, "hidden": 64, "inputs": 32, "classes": 10, "batch": 16,
         "learning_rate": 1e-3, "seed": 0}
SIZES = {
    "tiny": {"layers": 2, "hidden": 16, "inputs": 8, "classes": 4, "batch": 4},
    "small": {"layers": 2, "hidden": 64, "inputs": 32, "classes": 10, "batch": 16},
    "large": {"layers": 8, "hidden": 1024, "inputs": 784, "classes": 10, "batch": 256},
}

tf1 = tf.compat.v1


def build(layers=2, hidden=64, inputs=32, classes=10, batch=16, learning_rate=1e-3, seed=0) -> Model:
    for knob, value in (("hidden", hidden), ("inputs", inputs), ("classes", classes), ("batch", batch)):
        if value < 1:
            raise UserError(f"--set: knob {knob!r} must be at least 1, got {value}")
    if layers < 0:
        raise UserError(f"--set: knob 'layers' must be at least 0, got {layers}")
    graph = tf.Graph()
    with graph.as_default():
        tf1.set_random_seed(seed)
        x = tf1.placeholder(tf.float32, [batch, inputs], name="x")
        y = tf1.placeholder(tf.float32, [batch, classes], name="y")
        h, width = x, inputs
        for i in range(layers):
            h = tf.nn.relu(_dense(h, width, hidden, f"layer{i}"), name=f"layer{i}/relu")
            width = hidden
        logits = _dense(h, width, classes, "logits")
        xent = tf.nn.softmax_cross_entropy_with_logits(labels=y, logits=logits)
        loss = tf.reduce_mean(xent, name="loss")
        train = tf1.train.AdamOptimizer(learning_rate).minimize(loss, name="train")
        init = tf1.global_variables_initializer()
    return Model(graph=graph, train_op=train.name, loss=loss.name, init=init.name,
                 feed=_feed_fn(seed, batch, inputs, classes), seed=seed)


def _dense(h, fan_in, fan_out, scope):
    with tf1.variable_scope(scope):
        w = tf1.get_variable("w", [fan_in, fan_out], use_resource=True,
                             initializer=tf1.glorot_uniform_initializer())
        b = tf1.get_variable("b", [fan_out], use_resource=True, initializer=tf1.zeros_initializer())
        return tf.nn.bias_add(tf.matmul(h, w), b)


def _feed_fn(seed, batch, inputs, classes):
    teacher = np.random.RandomState(seed).standard_normal((inputs, classes))
    eye = np.eye(classes, dtype=np.float32)

    def feed(step: int) -> dict:
        x = np.random.RandomState(seed + step).standard_normal((batch, inputs)).astype(np.float32)
        return {"x:0": x, "y:0": eye[np.argmax(x @ teacher, axis=1)]}

    return feed

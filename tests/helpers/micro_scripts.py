"""Model scripts (pardnn.models' build protocol) that `--micro-batches` must refuse,
for tests/test_tf_micro_batches.py: MODE selects the flaw."""

import tensorflow as tf

from pardnn.models import Model

tf1 = tf.compat.v1
KNOBS = {"batch": 4, "mode": "max"}


def build(batch=4, mode="max"):
    graph = tf.Graph()
    with graph.as_default():
        tf1.set_random_seed(0)
        x = tf1.placeholder(tf.float32, [batch, 3], name="x")
        w = tf1.get_variable("w", [3, 1], use_resource=True)
        y = tf.matmul(x, w)
        if mode == "max":                   # not a mean or sum over the samples
            loss = tf.reduce_max(tf.square(y), name="loss")
        else:                               # a write inside the per-sample part
            seen = tf1.get_variable("seen", [], use_resource=True, trainable=False)
            with tf.control_dependencies([seen.assign_add(tf.reduce_sum(y))]):
                loss = tf.reduce_mean(tf.square(y), name="loss")
        train = tf1.train.GradientDescentOptimizer(0.1).minimize(loss, name="train")
        init = tf1.global_variables_initializer()
    return Model(graph=graph, train_op=train.name, loss=loss.name, init=init.name,
                 feed=lambda step: {"x:0": [[1.0, 2.0, 3.0]] * batch})

"""Small TF1 training graphs with known costs, for the estimate tests
(tests/test_estimate.py, tests/test_gpu_kernel_times.py). Imports TensorFlow."""

import numpy as np
import tensorflow as tf

from pardnn.models import Model

tf1 = tf.compat.v1

N = 256


def matmul_model():
    """loss = sum(x @ w) with Adam; x is [None, N] and fed N rows."""
    graph = tf.Graph()
    with graph.as_default():
        x = tf1.placeholder(tf.float32, [None, N], name="x")
        w = tf1.get_variable("w", [N, N], use_resource=True)
        loss = tf.reduce_sum(tf.matmul(x, w, name="fwd"), name="loss")
        train = tf1.train.AdamOptimizer().minimize(loss, name="train")
        init = tf1.global_variables_initializer()
    feed = lambda step: {"x:0": np.ones((N, N), np.float32)}    # noqa: E731
    return Model(graph=graph, train_op=train.name, loss=loss.name, init=init.name, feed=feed)

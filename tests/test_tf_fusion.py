"""Grappler fusion patterns become colocation ties (pardnn.tf.fusion)."""

import numpy as np
import pytest

import pardnn.tf.quiet_import  # noqa: F401  (quiet TensorFlow import first)
import tensorflow as tf

from pardnn.tf.colocation import colocation_groups
from pardnn.tf.fusion import fusion_ties, spread_fused_times
from pardnn.tf.graphdef import graph_table
from pardnn.tf.op_defs import from_tensorflow

pytestmark = pytest.mark.tf
tf1 = tf.compat.v1


def _groups(build):
    """{pattern: count} and the sets of node names tied together, for a graph
    built by build() in a fresh tf.Graph."""
    graph = tf.Graph()
    with graph.as_default():
        build()
    graph_def = graph.as_graph_def(add_shapes=True)
    table = graph_table(graph_def, from_tensorflow({n.op for n in graph_def.node}))
    fusions = fusion_ties(table)
    label = colocation_groups(table, fusions.ties).tolist()
    sets = {}
    for name, g in zip(table.names, label):
        sets.setdefault(g, set()).add(name)
    return fusions.counts, [s for s in sets.values() if len(s) > 1]


def _x(shape=(2, 3)):
    return tf1.placeholder(tf.float32, shape, name="x")


def test_matmul_bias_relu_is_one_group_and_a_second_consumer_is_not_in_it():
    def build():
        m = tf.matmul(_x(), tf.ones([3, 4]), name="mm")
        r = tf.nn.relu(tf.nn.bias_add(m, tf.ones([4]), name="bias"), name="act")
        tf.identity(r, name="after")
    counts, groups = _groups(build)
    assert counts == {"contraction_bias_activation": 1}
    assert groups == [{"mm", "bias", "act"}]


def test_bias_without_activation_and_add_with_residual():
    def build():
        x = _x((2, 4))
        m = tf.matmul(x, tf.ones([4, 4]), name="mm")
        b = tf.nn.bias_add(m, tf.ones([4]), name="bias")
        tf.add(b, x, name="residual")                      # Contraction+BiasAdd+Add (oneDNN)
        m2 = tf.matmul(x, tf.ones([4, 4]), name="mm2")
        tf.nn.bias_add(m2, tf.ones([4]), name="bias2")
    counts, groups = _groups(build)
    assert counts == {"contraction_bias": 1, "contraction_bias_add": 1}
    assert sorted(map(sorted, groups)) == [["bias", "mm", "residual"], ["bias2", "mm2"]]


def test_conv_squeeze_bias_and_batchnorm_relu():
    def build():
        x = tf1.placeholder(tf.float32, [1, 1, 4, 2], name="x")
        c = tf.nn.conv2d(x, tf.ones([1, 1, 2, 3]), 1, "VALID", name="conv")
        s = tf.squeeze(c, [1], name="sq")
        tf.nn.bias_add(s, tf.ones([3]), name="bias")
        y, _, _ = tf1.nn.fused_batch_norm(x, tf.ones([2]), tf.zeros([2]), is_training=True, name="bn")
        tf.nn.relu(y, name="bn_relu")
    counts, groups = _groups(build)
    assert counts == {"batchnorm_activation": 1, "conv_squeeze_bias": 1}
    assert sorted(map(sorted, groups)) == [["bias", "conv", "sq"], ["bn", "bn_relu"]]


def test_swish_and_unrelated_mul():
    def build():
        x = _x()
        tf.multiply(x, tf.sigmoid(x, name="sig"), name="swish")
        tf.multiply(x, tf.sigmoid(tf.ones([2, 3]), name="sig2"), name="not_swish")
    counts, groups = _groups(build)
    assert counts == {"swish": 1}
    assert groups == [{"sig", "swish"}]


def test_a_graph_without_patterns_gets_no_ties():
    def build():
        tf.nn.relu(tf.add(_x(), 1.0, name="add"), name="act")
    assert _groups(build) == ({}, [])


def test_a_fused_groups_time_is_spread_over_the_nodes_it_replaced():
    comp = np.array([0.0, 0.0, 9.0, 4.0, 2.0, 5.0])
    timed = np.array([False, False, True, True, True, False])
    # group [0, 1, 2]: fused, timed under node 2; group [3, 4]: not fused; node 5 alone
    spread, given = spread_fused_times(comp, timed, [[0, 1, 2], [3, 4]])
    assert spread.tolist() == [3.0, 3.0, 3.0, 4.0, 2.0, 5.0] and given == 2
    assert comp.tolist() == [0.0, 0.0, 9.0, 4.0, 2.0, 5.0]      # input unchanged


def test_profile_with_rewrites_on_spreads_the_fused_kernels_time(tmp_path):
    from pardnn.cli import main
    from pardnn.tf import load_profile
    assert main(["profile", "mlp", "--size", "tiny", "--steps", "2", "--rewrites", "on",
                 "-o", str(tmp_path / "prof")]) == 0
    graph, info = load_profile(str(tmp_path / "prof"))
    assert info["profile"]["rewrites"] == "on"
    assert info["fusions"] == {"contraction_bias": 1, "contraction_bias_activation": 2}
    assert info["fused_timed_nodes"] == 5           # 2 x (MatMul, BiasAdd) + logits/MatMul
    ix = graph.index()
    times = [graph.comp_us[ix[n]] for n in ("layer0/MatMul", "layer0/BiasAdd", "layer0/relu")]
    assert times[0] > 0 and times == [times[0]] * 3
    assert info["untimed_nodes"] >= 5               # still counted as untimed


@pytest.mark.parametrize("approximate", [False, True])
def test_matmul_bias_gelu_ties_the_element_wise_nodes_of_gelu(approximate):
    def build():
        b = tf.nn.bias_add(tf.matmul(_x(), tf.ones([3, 4]), name="mm"), tf.ones([4]), name="bias")
        with tf.name_scope("gelu"):
            g = tf.nn.gelu(b, approximate=approximate)
        tf.identity(g, name="after")
    counts, groups = _groups(build)
    assert counts == {"matmul_bias_gelu": 1}
    (group,) = groups
    assert {"mm", "bias"} < group and "after" not in group
    # TF 2.21 (oneDNN) names the fused kernel after Gelu's last Mul, measured
    assert ("gelu/Gelu/mul_3" if approximate else "gelu/Gelu/mul_2") in group

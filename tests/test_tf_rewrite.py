"""Placed GraphDefs: devices written, nothing else changed; imports; the TF check."""

import numpy as np
import pytest

import pardnn.tf.quiet_import  # noqa: F401  (quiet TensorFlow import first)
import tensorflow as tf

from pardnn.placers.round_robin import place as round_robin
from pardnn.hardware import parse_devices
from pardnn.graph import CostGraph
from pardnn.io.placement import Placement
from pardnn.tf import (check_placement, import_placed_graph, load_profile, profile,
                       session_config, write_placed_graph)
from pardnn.tf.graphdef import read_graph_def
from pardnn.tf.placed_graph import placed_devices
from pardnn.tf.rewrite import compare_partitions

pytestmark = pytest.mark.tf
tf1 = tf.compat.v1
CPU = "/job:localhost/replica:0/task:0/device:CPU:"
GPU = "/job:localhost/replica:0/task:0/device:GPU:"


def test_group_with_a_pin_the_cluster_lacks_goes_to_host_cpu():
    g = CostGraph.build(names=["a", "b", "c", "d"], group=[0, 0, 1, 2], pinned=["", "CPU", "", "GPU"],
                        edge_src=[0, 1, 2], edge_dst=[1, 2, 3])
    device = np.array([1, 1, 0, 1], np.int32)
    assert placed_devices(g, Placement(device, parse_devices("gpu:2"))) == [CPU + "0", CPU + "0", GPU + "0", GPU + "1"]
    assert placed_devices(g, Placement(device, parse_devices("cpu:2"))) == [CPU + "1", CPU + "1", CPU + "0", CPU + "0"]


def _partition(*nodes):
    graph_def = tf1.GraphDef()
    for name, device in nodes:
        graph_def.node.add(name=name, op="NoOp", device=device)
    return graph_def


def test_compare_partitions_counts_runs_and_moves():
    requested = {"a": CPU + "0", "b": "/device:CPU:1", "c": CPU + "1", "idle": CPU + "0"}
    partitions = [_partition(("a", CPU + "0"), ("c", CPU + "0"), ("a/_3", CPU + "0")),
                  _partition(("b", CPU + "1"), ("_SOURCE", CPU + "1"))]
    check = compare_partitions(requested, partitions)
    assert check.nodes_per_device == {CPU + "0": 2, CPU + "1": 1}
    assert check.moved == [("c", CPU + "1", CPU + "0")] and check.num_run == 3   # b: partial name


def test_check_placement_reports_a_node_tf_had_to_move():
    graph = tf.Graph()
    with graph.as_default():
        with tf.device(CPU + "0"):
            a = tf.constant(2.0, name="a")
        with tf.device(CPU + "1"):
            b = tf.identity(a, name="b")
        with tf.device(CPU + "7"):                      # no such device: TF moves it
            c = tf.multiply(b, 3.0, name="c")
    with tf1.Session(graph=graph, config=session_config(2)) as session:
        value, check = check_placement(session, c)
    assert value == 6.0
    assert sorted(check.moved) == [("c", CPU + "7", CPU + "0"), ("c/y", CPU + "7", CPU + "0")]  # c/y: the 3.0
    assert check.nodes_per_device[CPU + "1"] == 1


@pytest.fixture
def tiny_profile(tmp_path):
    graph = tf.Graph()
    with graph.as_default():
        x = tf1.placeholder(tf.float32, [2, 3], name="x")
        v = tf1.get_variable("v", [3, 2], use_resource=True, initializer=tf1.ones_initializer())
        y = tf.reduce_sum(tf.matmul(x, v), name="y")
        init = tf1.global_variables_initializer()
    with tf1.Session(graph=graph, config=session_config()) as session:
        session.run(init)
        profile(session, y, {x: np.ones((2, 3), np.float32)}, steps=1, out_dir=str(tmp_path / "prof"))
    return tmp_path / "prof"


def test_write_placed_graph_sets_devices_and_nothing_else(tiny_profile, tmp_path):
    cost, _ = load_profile(str(tiny_profile))
    cluster = parse_devices("cpu:3")
    placement = Placement(round_robin(cost, cluster), cluster)
    write_placed_graph(tiny_profile, cost, placement, tmp_path / "placed.pb")
    original, placed = read_graph_def(tiny_profile / "graph.pb"), read_graph_def(tmp_path / "placed.pb")
    ix = cost.index()
    assert [n.device for n in placed.node] == [cluster.names[placement.device[ix[n.name]]] for n in placed.node]
    assert len({n.device for n in placed.node}) == 3
    for node in placed.node:
        node.device = ""
    assert placed == original


def test_import_placed_graph_keeps_names_and_devices(tiny_profile, tmp_path):
    cost, _ = load_profile(str(tiny_profile))
    cluster = parse_devices("cpu:2")
    write_placed_graph(tiny_profile, cost, Placement(round_robin(cost, cluster), cluster), tmp_path / "placed.pb")
    graph = tf.Graph()
    with graph.as_default():
        (y,) = import_placed_graph(str(tmp_path / "placed.pb"), return_elements=["y:0"])
    assert y.name == "y:0" and y.op.device.startswith(CPU)
    with tf1.Session(graph=graph, config=session_config(2)) as session:
        session.run("init")
        value, check = check_placement(session, y, {"x:0": np.ones((2, 3), np.float32)})
    assert value == 12.0 and check.moved == [] and len(check.nodes_per_device) == 2

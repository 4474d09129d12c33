"""TF2: pardnn.tf.profile_function and pardnn.tf.placed on a Keras training step."""

import json
import os
import subprocess
import sys

import pytest

import pardnn.tf.quiet_import  # noqa: F401  (quiet TensorFlow import first)
import tensorflow as tf

from pardnn.base.errors import UserError
from pardnn.tf import placed, profile_function

pytestmark = pytest.mark.tf
HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.mark.slow
def test_keras_step_placed_on_four_logical_cpus(tmp_path):
    proc = subprocess.run([sys.executable, os.path.join(HERE, "helpers", "keras_step_script.py"), str(tmp_path)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["moved"] == []                               # every op ran where placed
    assert len(result["per_device"]) == 4                      # round-robin used all four
    assert result["placed"] == pytest.approx(result["unplaced"], abs=1e-5)
    assert result["placed"][0] != result["placed"][-1]         # it trained
    assert "does not match the trace of step" in result["mismatch"]
    assert "\n" not in result["mismatch"]


def test_a_plain_python_function_is_refused(tmp_path):
    with pytest.raises(UserError, match="step_fn: <lambda> is not a tf.function"):
        profile_function(lambda x: x, (1.0,), out_dir=str(tmp_path / "p"))

    def step(x):
        return x
    with pytest.raises(UserError, match="step_fn: step is not a tf.function"):
        placed(step, str(tmp_path / "placement.csv"))
    assert not (tmp_path / "p").exists()


def test_args_that_do_not_fit_the_signature_are_refused(tmp_path):
    @tf.function(input_signature=[tf.TensorSpec([2], tf.float32)])
    def step(x):
        return x * 2.0
    with pytest.raises(UserError, match="args: step cannot be traced with them"):
        profile_function(step, (tf.ones([3]),), out_dir=str(tmp_path / "p"))
    assert not (tmp_path / "p").exists()


def test_keyword_arguments_are_fed_in_signature_order(tmp_path):
    """The step's inputs follow its signature (x, y, weight); keywords given as
    y=, weight= must feed y and weight, not the order of their sorted names."""
    w = tf.Variable(tf.ones([4, 2]), name="w")

    @tf.function
    def step(x, y, weight):
        tf.debugging.assert_positive(y, message="y fed with weight's values")
        return tf.reduce_sum((tf.matmul(x, w) - y) ** 2 * weight[:, None])

    x, y, weight = tf.ones([3, 4]), tf.ones([3, 2]), -tf.ones([3])
    assert float(step(x, weight=weight, y=y)) < 0                     # the step as TF calls it
    doc = profile_function(step, (x,), kwargs={"y": y, "weight": weight}, steps=1,
                           out_dir=str(tmp_path / "p"))
    assert doc["steps"] == 1 and (tmp_path / "p" / "graph.pb").exists()

    @tf.function
    def keyword_only(x, *rest, y, weight):                          # TF binds these by sorted name
        tf.debugging.assert_positive(y, message="y fed with weight's values")
        return tf.reduce_sum((tf.matmul(x, w) - y) ** 2 * weight[:, None])
    profile_function(keyword_only, (x,), kwargs={"y": y, "weight": weight}, steps=1,
                     out_dir=str(tmp_path / "q"))

    @tf.function
    def with_default(x, y=tf.ones([3, 2])):  # noqa: B008              # a tensor default is an input too
        return tf.reduce_sum(tf.matmul(x, w) - y)
    profile_function(with_default, (x,), steps=1, out_dir=str(tmp_path / "r"))


def test_a_step_that_creates_its_variables_when_traced_is_refused(tmp_path):
    """An optimizer built lazily makes its slots on the step's first trace: the
    profile would hold their initialisers, which no later trace has."""
    w = tf.Variable(tf.ones([4, 2]), name="w")
    slots = []

    @tf.function
    def step(x):
        if not slots:
            slots.append(tf.Variable(tf.zeros([4, 2]), name="slot"))
        loss = tf.reduce_sum(tf.matmul(x, w))
        slots[0].assign_add(tf.ones([4, 2]) * loss)
        return loss
    with pytest.raises(UserError, match=r"step_fn: step creates variables when traced \(slot.*optimizer.build"):
        profile_function(step, (tf.ones([3, 4]),), steps=1, out_dir=str(tmp_path / "p"))
    assert not (tmp_path / "p").exists()


def test_a_placement_naming_unknown_devices_is_refused(tmp_path):
    csv = tmp_path / "placement.csv"
    csv.write_text("node,device\nx,/job:localhost/replica:0/task:0/device:CPU:9\n")

    @tf.function
    def step(x):
        return x * 2.0
    with pytest.raises(UserError, match=r"placement.csv:2: device '.*CPU:9' is not one of this process's"):
        placed(step, str(csv))


@pytest.mark.parametrize("content, message", [
    (b"\xef\xbb\xbfnode,device\nx,/device:CPU:0\n", None),            # an editor's BOM: a header still
    (b"node,device\n\xff\xfe,1\n", "placement.csv: not a text CSV file"),
    (b"node,device\n\"x,/device:CPU:0\n" + b"y" * 140_000 + b"\n", "placement.csv: not a CSV file"),
])
def test_a_tf2_plans_placement_csv_is_read_as_emulate_reads_it(tmp_path, content, message):
    from pardnn.tf.plan_devices import read_devices
    path = tmp_path / "placement.csv"
    path.write_bytes(content)
    if message is None:
        assert read_devices(str(path)) == {"x": "/device:CPU:0"}
    else:
        with pytest.raises(UserError, match=message):
            read_devices(str(path))


def test_a_step_calling_a_tf_function_over_a_variable_places_as_profiled(tmp_path):
    """A step whose inner tf.function reads a variable (Keras' grouped convolution on a
    CPU calls one, compiled with XLA: ConvNeXt's depthwise convolutions): TF names the
    handle the call passes on by a process-wide counter, so no later trace had the
    profile's names (issue 52, item 1). Each trace names it after its scope instead."""
    w = tf.Variable(tf.ones([4, 2]), name="w")

    @tf.function
    def step(x):
        @tf.function
        def inner():
            return tf.matmul(x, w)
        with tf.name_scope("conv"):
            y = inner()
        w.assign_sub(0.1 * tf.ones([4, 2]))
        return tf.reduce_sum(y)
    profile_function(step, (tf.ones([3, 4]),), steps=1, out_dir=str(tmp_path / "p"))
    graph = tf.compat.v1.GraphDef.FromString((tmp_path / "p" / "graph.pb").read_bytes())
    csv = tmp_path / "p" / "placement.csv"
    csv.write_text("node,device\n" + "".join(f"{n.name},/device:CPU:0\n" for n in graph.node))
    placed_step = placed(step, str(csv))
    assert float(placed_step(tf.ones([3, 4]))) == 24.0
    assert float(placed_step(tf.ones([3, 4]))) == pytest.approx(24.0 - 0.1 * 4 * 3 * 2)


def test_the_ops_of_an_inner_tf_function_take_no_device_from_the_placement(tmp_path):
    """An inner tf.function is traced under the step's device functions, but the
    placement names the step's own ops: an inner op of the same name (its `MatMul`, the
    `NoOp` its side effects end on) is another op, and runs where its call runs. Given
    the outer op's device, it was reported moved (ConvNeXt's fit: 'NoOp')."""
    from pardnn.tf.function import requested_devices
    w = tf.Variable(tf.ones([4, 2]), name="w")

    @tf.function
    def step(x):
        @tf.function
        def inner():
            w.assign_add(tf.ones([4, 2]))
            return tf.matmul(x, w)
        y = tf.matmul(x, w)
        return tf.reduce_sum(y + inner())
    profile_function(step, (tf.ones([3, 4]),), steps=1, out_dir=str(tmp_path / "p"))
    graph = tf.compat.v1.GraphDef.FromString((tmp_path / "p" / "graph.pb").read_bytes())
    csv = tmp_path / "p" / "placement.csv"
    csv.write_text("node,device\n" + "".join(f"{n.name},/device:CPU:0\n" for n in graph.node))
    placed_step = placed(step, str(csv))
    placed_step(tf.ones([3, 4]))
    traced = placed_step.get_concrete_function(tf.ones([3, 4])).graph
    inner = [node for f in traced.as_graph_def().library.function for node in f.node_def]
    assert {"MatMul", "NoOp"} <= {node.name for node in inner}
    assert [node.name for node in inner if node.device] == []
    assert set(requested_devices(placed_step)) <= {op.name for op in traced.get_operations()}

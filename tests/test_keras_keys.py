"""pardnn.keras's parts without a plan: variable keys that Keras' names do not change,
Keras' name counters per build, and shape-only variables read while a model builds."""

import pytest

import pardnn.tf.quiet_import  # noqa: F401  (quiet TensorFlow import first)
import keras
import tensorflow as tf

from pardnn.keras.keys import layer_summary, variable_keys
from pardnn.keras.names import KerasNames
from pardnn.tf import shape_only_variables

pytestmark = pytest.mark.tf


def shared_model():
    """Two inputs through one shared Dense inside a nested Sequential, then a head; Adam built."""
    a, b = keras.Input((4,)), keras.Input((4,))
    encoder = keras.Sequential([keras.layers.Dense(3), keras.layers.Dropout(0.5)])
    out = keras.layers.Dense(2)(keras.layers.Concatenate()([encoder(a), encoder(b)]))
    model = keras.Model([a, b], out)
    model.compile(optimizer=keras.optimizers.Adam(), loss="mse", metrics=["mae"])
    model.optimizer.build(model.trainable_variables)
    return model


def keyed(model):
    keys = variable_keys([model])
    return {keys[id(v.value)]: v.shape for v in model.variables + model.optimizer.variables}


def test_keys_are_paths_in_the_model_whatever_keras_named_the_layers():
    first, second = shared_model(), shared_model()        # second: dense_2, sequential_1, ...
    assert [v.path for v in first.variables] != [v.path for v in second.variables]
    assert keyed(first) == keyed(second)
    keys = keyed(first)
    assert keys["layers[2]/layers[1]/kernel"] == (4, 3)   # the shared encoder: one path
    assert keys["layers[2]/layers[2]/seed_generator_state"] == (2,)
    assert keys["layers[4]/kernel"] == (6, 2)
    assert keys["optimizer/layers[2]/layers[1]/kernel/momentum"] == (4, 3)   # a slot: its variable's key
    assert keys["optimizer/iteration"] == ()
    assert layer_summary(first) == layer_summary(second) == [
        ["layers[0]", "InputLayer"], ["layers[1]", "InputLayer"], ["layers[2]", "Sequential"],
        ["layers[2]/layers[0]", "InputLayer"], ["layers[2]/layers[1]", "Dense"], ["layers[2]/layers[2]", "Dropout"],
        ["layers[3]", "Concatenate"], ["layers[4]", "Dense"]]


def test_a_compiled_metrics_state_is_keyed_by_its_place():
    model = shared_model()
    spec = tf.TensorSpec([1, 4])
    tf.function(model.train_step).get_concrete_function(([spec, spec], tf.TensorSpec([1, 2])))  # builds them
    keys = variable_keys([model])
    named = sorted(keys[id(v.value)] for m in model.metrics for v in m.variables)
    assert named == ["metrics[0]/count", "metrics[0]/total", "metrics[1]/count", "metrics[1]/total"]


def test_keras_names_count_from_zero_in_each_build_and_leave_the_process_counters():
    keras.layers.Dense(1)                                 # the process' counter moves on
    outside = keras.layers.Dense(1).name
    names = KerasNames()
    with names.active():
        inside = [keras.layers.Dense(1).name for _ in range(2)]
    with KerasNames().active():
        again = keras.layers.Dense(1).name
    assert inside == ["dense", "dense_1"] and again == "dense"
    assert keras.layers.Dense(1).name == f"dense_{int(outside.rsplit('_', 1)[-1]) + 1}"
    with names.active():                                  # the build's counters go on where they were
        assert keras.layers.Dense(1).name == "dense_2"


class ReadsInBuild(keras.layers.Layer):
    def build(self, shape):
        self.scale = self.add_weight(shape=(shape[-1],), initializer="ones", name="scale")
        self.total = float(keras.ops.sum(self.scale))

    def call(self, x):
        return x * self.scale / self.total


def test_a_shape_only_variable_read_while_building_holds_its_initial_value():
    with shape_only_variables():
        inputs = keras.Input((3,))
        x = ReadsInBuild()(keras.layers.Normalization()(inputs))
        model = keras.Model(inputs, keras.layers.Dense(4096)(x))
    norm, reads, dense = model.layers[1], model.layers[2], model.layers[3]
    assert reads.total == 3.0                                      # not the sum of an empty tensor
    assert norm.mean.numpy().tolist() == [[0.0, 0.0, 0.0]] and norm.variance.numpy().tolist() == [[1.0] * 3]
    assert reads.scale.value.is_initialized() and norm.adapt_mean.value.is_initialized()
    assert not dense.kernel.value.is_initialized()                # never read: no memory
    assert not norm.count.value.is_initialized()


def test_auto_memory_is_the_devices_real_memory():
    from pardnn.hardware.cluster import host_memory
    from pardnn.keras.devices import plan_cluster
    assert list(plan_cluster("cpu:4").memory) == [host_memory() // 4] * 4      # 4 logical devices share it
    assert list(plan_cluster("dgx-h100").memory) == [80 * 2**30] * 8            # an H100 80GB, as its preset gives
    assert list(plan_cluster("cpu:4", "3MiB").memory) == [3 * 2**20] * 4
    assert list(plan_cluster("cpu:4", 1000, reserve=0).memory) == [1000] * 4

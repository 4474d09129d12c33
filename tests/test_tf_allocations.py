"""Per-device peaks from a traced step's allocation records (pardnn.tf.allocations)."""

import numpy as np
import pytest

import pardnn.tf.quiet_import  # noqa: F401  (quiet TensorFlow import first)
import tensorflow as tf
from tensorflow.core.framework import step_stats_pb2

from pardnn.tf import check_placement, session_config
from pardnn.tf.allocations import HOST, step_peaks

pytestmark = pytest.mark.tf
tf1 = tf.compat.v1
CPU = "/job:localhost/replica:0/task:0/device:CPU:"
GPU = "/job:localhost/replica:0/task:0/device:GPU:0"


def stats(devices):
    """StepStats from {device: [(allocator, [(micros, bytes), ...]), ...]}."""
    out = step_stats_pb2.StepStats()
    for device, nodes in devices.items():
        dev = out.dev_stats.add(device=device)
        for allocator, records in nodes:
            memory = dev.node_stats.add(node_name="op").memory.add(allocator_name=allocator)
            for micros, nbytes in records:
                memory.allocation_records.add(alloc_micros=micros, alloc_bytes=nbytes)
    return out


def test_running_total_per_device_with_frees_first_at_one_instant():
    peaks = step_peaks(stats({
        CPU + "0": [("cpu", [(1, 100), (5, -100)]), ("cpu", [(5, 60), (9, -60)]), ("cpu", [(3, 30), (4, -30)])],
        CPU + "1": [("cpu", [(6, 40)])],
    }))
    # the shared host allocator peaks at 130 (t=3), not at 130 + 40: CPU:1 allocates after CPU:0 freed
    assert peaks == {CPU + "0": 130, CPU + "1": 40, HOST: 130}


def test_a_gpu_counts_only_its_own_allocator_and_its_streams_fold_into_it():
    peaks = step_peaks(stats({
        GPU: [("GPU_0_bfc", [(1, 500), (3, -500)]), ("cuda_host_bfc", [(1, 9999)])],
        GPU + "/stream:all": [("GPU_0_bfc", [(2, 200), (4, -200)])],
    }))
    assert peaks == {GPU: 700}


def test_check_placement_measures_each_device():
    with tf.Graph().as_default() as graph:
        x = tf1.placeholder(tf.float32, [256, 256], name="x")
        with tf.device(CPU + "0"):
            a = tf.matmul(x, x)
        with tf.device(CPU + "1"):
            b = tf.matmul(a, a) + 1.0
    with tf1.Session(graph=graph, config=session_config(2)) as session:
        _, check = check_placement(session, b, {x: np.ones((256, 256), np.float32)})
    assert set(check.step_peak_bytes) == {CPU + "0", CPU + "1", HOST}
    assert all(peak >= 256 * 256 * 4 for peak in check.step_peak_bytes.values())
    assert check.step_peak_bytes[HOST] <= check.step_peak_bytes[CPU + "0"] + check.step_peak_bytes[CPU + "1"]

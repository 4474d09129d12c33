"""Fitting the measured link model and writing it as a cluster file (no TensorFlow)."""

import numpy as np
import pytest

from pardnn.hardware import GBps, Device, Host, parse_devices
from pardnn.hardware.cluster_file import save
from pardnn.hardware.link_fit import MAX_BANDWIDTH, MIN_TIME_US, device_pairs, fit_pair, fitted_cluster, format_links

SIZES = [4096, 262144, 4 << 20]


def test_exact_line_is_recovered():
    times = [20.0 + s / (2 * GBps) for s in SIZES]          # 20 us + 2 GB/s
    latency, bandwidth, error = fit_pair(SIZES, times)
    assert latency == pytest.approx(20.0) and bandwidth == pytest.approx(2 * GBps)
    assert error == pytest.approx(0.0, abs=1e-9)


def test_small_transfers_weigh_as_much_as_large_ones():
    # 10% noise on the largest transfer must not swamp the 5 us latency of the small ones
    times = [5.0 + s / (10 * GBps) for s in SIZES]
    times[-1] *= 1.10
    latency, _, _ = fit_pair(SIZES, times)
    assert latency == pytest.approx(5.0, rel=0.05)


def test_zero_copy_pairs_clip_to_max_bandwidth():
    latency, bandwidth, error = fit_pair(SIZES, [3.0, 1.0, -2.0])     # noise around zero
    times = np.array([3.0, 1.0, -2.0])
    weights = 1 / np.maximum(np.abs(times), MIN_TIME_US)
    # weighted least squares solved directly: its slope is negative, so only the
    # bandwidth clips; the latency is the line's intercept
    (slope, intercept), *_ = np.linalg.lstsq(np.c_[SIZES, np.ones(3)] * weights[:, None],
                                             times * weights, rcond=None)
    assert slope < 0 and bandwidth == MAX_BANDWIDTH
    assert latency == pytest.approx(intercept, rel=1e-6) and latency > 1.0
    residual = (latency + np.array(SIZES) / MAX_BANDWIDTH - times) * weights
    assert error == pytest.approx(np.sqrt(np.mean(residual ** 2)), rel=1e-6)


def test_fitted_cluster_is_symmetric_and_loads_back(tmp_path):
    hosts = [Host("/job:worker/task:0", "10.0.0.1:2222"), Host("/job:worker/task:1", "10.0.0.2:2222")]
    devices = [Device(f"{hosts[h].task}/device:GPU:{i}", "GPU", 80 << 30, h) for h in range(2) for i in range(2)]
    pairs = device_pairs(4)
    assert pairs == [(0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3)]
    same = np.array([devices[i].host == devices[j].host for i, j in pairs])
    lat = np.where(same, 8.0, 30.0)
    bw = np.where(same, 400 * GBps, 20 * GBps)
    hop_us = lat[:, None] + np.array(SIZES)[None, :] / bw[:, None]
    cluster, err = fitted_cluster(devices, hosts, SIZES, hop_us, reserve=0.2)
    assert np.allclose(cluster.latency_us, cluster.latency_us.T) and err.max() < 1e-9
    assert cluster.latency_us[0, 2] == pytest.approx(30.0) and cluster.bandwidth[1, 0] == pytest.approx(400 * GBps)
    path = tmp_path / "measured.json"
    save(cluster, str(path))
    back = parse_devices(str(path))
    assert back.names == cluster.names and back.hosts == cluster.hosts and back.reserve == 0.2
    assert np.allclose(back.latency_us, cluster.latency_us)
    assert np.allclose(back.bandwidth[~np.eye(4, dtype=bool)], cluster.bandwidth[~np.eye(4, dtype=bool)])
    text = format_links(cluster, err, SIZES)
    assert "task:1/GPU:0" in text and "400.00" in text and "20.00" in text

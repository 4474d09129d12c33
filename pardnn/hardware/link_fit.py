"""Fitting the link model `latency + bytes / bandwidth` to measured transfer times
(`pardnn links`; the measuring is pardnn.tf.link_bench).

Per device pair, the cost of one transfer of s bytes was measured for several s.
A straight line t = a + s / B is fitted by least squares on relative residuals
(weights 1 / t), so that the small transfers, which fix the latency, count as much
as the large ones, which fix the bandwidth. The intercept is clipped at 0, and the
bandwidth at MAX_BANDWIDTH: between two CPU devices of one process TensorFlow
passes the buffer without copying, so the time does not grow with the size and the
slope is noise around zero. The fit error of a pair is the RMS relative difference
between the line and the measurements.
"""

from __future__ import annotations

import numpy as np

from pardnn.hardware.cluster import GBps, Cluster
from pardnn.base.units import format_size

MAX_BANDWIDTH = 10_000 * GBps      # 10 TB/s: above any real link; "no copy"
MIN_TIME_US = 1.0                  # floor of the weights' denominators


def device_pairs(k: int) -> list:
    """The unordered pairs (i, j), i < j, of k devices, in a fixed order."""
    return [(i, j) for i in range(k) for j in range(i + 1, k)]


def fit_pair(sizes, times_us) -> tuple:
    """(latency_us, bandwidth in bytes/us, RMS relative error) of one pair."""
    sizes = np.asarray(sizes, float)
    times = np.asarray(times_us, float)
    weight = 1.0 / np.maximum(np.abs(times), MIN_TIME_US)
    slope, intercept = np.polyfit(sizes, times, 1, w=weight)
    latency = max(float(intercept), 0.0)
    inverse = max(float(slope), 1.0 / MAX_BANDWIDTH)
    fitted = latency + sizes * inverse
    error = float(np.sqrt(np.mean(((fitted - times) * weight) ** 2)))
    return latency, 1.0 / inverse, error


def fitted_cluster(devices, hosts, sizes, hop_us, reserve=0.10, name="links") -> tuple:
    """(Cluster with the fitted symmetric link matrix, K x K fit errors).

    hop_us[p, s] is the time of one transfer of sizes[s] bytes between the devices
    of pair p of device_pairs(len(devices))."""
    k = len(devices)
    lat, bw, err = np.zeros((k, k)), np.full((k, k), np.inf), np.zeros((k, k))
    for p, (i, j) in enumerate(device_pairs(k)):
        lat[i, j], bw[i, j], err[i, j] = fit_pair(sizes, hop_us[p])
        lat[j, i], bw[j, i], err[j, i] = lat[i, j], bw[i, j], err[i, j]
    return Cluster(tuple(devices), lat, bw, reserve, name, tuple(hosts)), err


def format_links(cluster, err, sizes) -> str:
    """The fitted matrices (latency, bandwidth) and the fit error per pair, as text."""
    labels = [_label(cluster, d) for d in cluster.devices]
    k = len(labels)
    off = ~np.eye(k, dtype=bool)
    bw = np.where(off, cluster.bandwidth / GBps, np.nan)
    lines = [f"fitted latency + bytes / bandwidth per device pair, from transfers of "
             f"{', '.join(format_size(s) for s in sizes)}"]
    lines += _table("latency (us)", labels, np.where(off, cluster.latency_us, np.nan), "{:.1f}")
    lines += _table("bandwidth (GB/s)", labels, bw, "{:.2f}")
    lines += _table("fit error (RMS, % of measured)", labels, np.where(off, 100 * err, np.nan), "{:.1f}")
    worst = np.unravel_index(np.argmax(np.where(off, err, -1.0)), err.shape) if k > 1 else (0, 0)
    lines.append(f"worst fit: {labels[worst[0]]} <-> {labels[worst[1]]}, {100 * err[worst]:.1f}% RMS")
    return "\n".join(lines)


def _label(cluster, device) -> str:
    short = device.name.rsplit("/device:", 1)[1]
    if len(cluster.hosts) < 2:
        return short
    return f"{cluster.hosts[device.host].task.rsplit('/', 1)[1]}/{short}"


def _table(title, labels, values, fmt) -> list:
    cells = [[("-" if np.isnan(v) else fmt.format(v)) for v in row] for row in values]
    width = max(len(x) for x in labels + [c for row in cells for c in row])
    head = " " * width + "  " + "  ".join(x.rjust(width) for x in labels)
    return [title + ":", head] + [label.rjust(width) + "  " + "  ".join(c.rjust(width) for c in row)
                                  for label, row in zip(labels, cells)]

"""Cluster: the K devices a graph is placed on, their memory, and the links between them.

A transfer of `b` bytes from device i to device j costs
`latency_us[i, j] + b / bandwidth[i, j]` microseconds (bandwidth in bytes per us).
Both are K x K matrices, so a topology (NVLink pairs vs PCIe vs network) can be
expressed. `reserve` is the fraction of each device's memory ParDNN keeps free for
fragmentation and temporary buffers (thesis §5.1: 10%, "the only parameter of ParDNN
that needs tuning"); `capacity` is what placements may use.

Presets are in pardnn.hardware.presets; `--devices` specs are parsed by
pardnn.hardware.spec.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace

import numpy as np

from pardnn.base.errors import UserError

GiB = 2**30
GBps = 1e3  # 1 GB/s in bytes per microsecond
LOCAL_PREFIX = "/job:localhost/replica:0/task:0/device:"
# Most devices one cluster may have. Links are dense K x K matrices and placers keep
# arrays per device pair and per (device, node), so K is bounded; 1024 devices is
# 8 MiB per link matrix, over 60 DGX hosts (docs/clusters.md).
MAX_DEVICES = 1024

@dataclass(frozen=True)
class Device:
    name: str      # full TensorFlow device name
    kind: str      # "GPU" or "CPU"
    memory: int    # bytes
    host: int = 0  # index into Cluster.hosts


@dataclass(frozen=True)
class Host:
    task: str          # TF task prefix, e.g. "/job:worker/task:0" ("/job:localhost/replica:0/task:0" locally)
    address: str = ""  # host:port of its tf.distribute.Server, "" for the local process


@dataclass(frozen=True, eq=False)
class Cluster:
    devices: tuple
    latency_us: np.ndarray
    bandwidth: np.ndarray
    reserve: float = 0.10
    preset: str = ""
    hosts: tuple = (Host("/job:localhost/replica:0/task:0"),)

    @property
    def num_devices(self) -> int:
        return len(self.devices)

    @property
    def names(self) -> list:
        return [d.name for d in self.devices]

    @property
    def memory(self) -> np.ndarray:
        return np.array([d.memory for d in self.devices], np.int64)

    @property
    def capacity(self) -> np.ndarray:
        """Usable bytes per device: memory minus the reserve."""
        return np.floor(self.memory * (1.0 - self.reserve)).astype(np.int64)

    def comm_us(self, src: int, dst: int, nbytes):
        """Time to move `nbytes` from device src to dst (0 on the same device)."""
        if src == dst:
            return 0.0 * np.asarray(nbytes, float)
        return self.latency_us[src, dst] + np.asarray(nbytes, float) / self.bandwidth[src, dst]

    def mean_link(self) -> tuple:
        """(latency_us, bandwidth) averaged over distinct device pairs, for
        algorithms that cost an edge before its endpoints have devices."""
        k = self.num_devices
        if k < 2:
            return 0.0, float("inf")
        off = ~np.eye(k, dtype=bool)
        with np.errstate(divide="ignore"):      # infinitely fast links: a mean of infinity
            return float(self.latency_us[off].mean()), float(1.0 / (1.0 / self.bandwidth[off]).mean())

    def cheapest_transfer_us(self, nbytes):
        """A floor on moving `nbytes` between any two distinct devices: the least latency
        plus bytes over the widest link (inf with one device). Lower bounds use it."""
        k = self.num_devices
        if k < 2:
            return np.full(np.shape(nbytes), np.inf)
        off = ~np.eye(k, dtype=bool)
        latency, bandwidth = float(self.latency_us[off].min()), float(self.bandwidth[off].max())
        return latency + np.asarray(nbytes, float) / bandwidth

    def with_options(self, memory=None, reserve=None, bandwidth=None, latency=None) -> "Cluster":
        """A copy with every device's memory, the reserve, or all links overridden."""
        out = self
        if memory is not None:
            out = replace(out, devices=tuple(replace(d, memory=int(memory)) for d in out.devices))
        if reserve is not None:
            if not 0.0 <= reserve < 1.0:
                raise UserError(f"--reserve: must be in [0, 1), got {reserve}")
            out = replace(out, reserve=float(reserve))
        k = out.num_devices
        if bandwidth is not None:
            out = replace(out, bandwidth=uniform_matrix(k, bandwidth, np.inf))
        if latency is not None:
            out = replace(out, latency_us=uniform_matrix(k, latency, 0.0))
        return out

    @property
    def host_of(self) -> np.ndarray:
        """Host index of each device."""
        return np.array([d.host for d in self.devices], np.int32)

    def device_index(self, name: str) -> int:
        """Index of a device given its full name or a suffix like `GPU:1`."""
        want = name.strip().upper().replace("/DEVICE:", "")
        for i, d in enumerate(self.devices):
            full = d.name.upper()
            if full == name.strip().upper() or full.endswith("/DEVICE:" + want):
                return i
        raise KeyError(name)


def check_device_count(k: int, flag: str, spec) -> None:
    """UserError when `spec` asks for more than MAX_DEVICES devices (before any
    K x K array is allocated)."""
    if k > MAX_DEVICES:
        raise UserError(f"{flag}: {spec!r} asks for {k} devices; pardnn places on at most {MAX_DEVICES}")


def host_memory() -> int:
    return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def uniform_matrix(k, value, diag):
    m = np.full((k, k), float(value))
    np.fill_diagonal(m, diag)
    return m

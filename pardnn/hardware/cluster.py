"""Cluster: the K devices a graph is placed on, their memory, and the links between them.

A transfer of `b` bytes from device i to device j costs
`latency_us[i, j] + b / bandwidth[i, j]` microseconds (bandwidth in bytes per us).
Both are K x K matrices, so a topology (NVLink pairs vs PCIe vs network) can be
expressed. `reserve` is the fraction of each device's memory ParDNN keeps free for
fragmentation and temporary buffers (thesis §5.1: 10%, "the only parameter of ParDNN
that needs tuning"); `capacity` is what placements may use.

Devices may differ in speed (docs/clusters.md, "Devices of different speeds"): each has
a compute rate for compute-bound ops (MatMul, convolutions) and a memory rate for every
other op, relative to the device the graph's costs came from (its profile, or the GPU
an estimate costed ops for), so op n takes `comp_us[n] * time_scale[class(n), d]` on
device d (pardnn.graph.op_rates). One device may be the host tier (`host_tier`): the
CPU with the system's memory that `+host` adds to a preset and `--host-memory` sizes.
A cluster whose devices all have rate 1 (every earlier cluster) costs ops exactly as
profiled.

Presets are in pardnn.hardware.presets; `--devices` specs are parsed by
pardnn.hardware.spec.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from functools import cached_property

import numpy as np

from pardnn.base.errors import UserError

GiB = 2**30
GBps = 1e3  # 1 GB/s in bytes per microsecond
LOCAL_PREFIX = "/job:localhost/replica:0/task:0/device:"
# Most devices one cluster may have. Links are dense K x K matrices and placers keep
# arrays per device pair and per (device, node), so K is bounded; 1024 devices is
# 8 MiB per link matrix, over 60 DGX hosts (docs/clusters.md).
MAX_DEVICES = 1024
# The rates a device may have, relative to the device the costs came from: a device
# 10,000 times slower or faster than that one is a mistake in the figures (the host of
# a DGX H100 runs MatMuls at 0.029 of its GPUs' rate, docs/clusters.md).
MIN_RATE, MAX_RATE = 1e-4, 1e4
# The device kinds TensorFlow places ops on (its DEVICE_CPU, DEVICE_GPU, DEVICE_TPU).
KNOWN_KINDS = ("CPU", "GPU", "TPU")

@dataclass(frozen=True)
class Device:
    name: str      # full TensorFlow device name
    kind: str      # one of KNOWN_KINDS: "CPU", "GPU" or "TPU"
    memory: int    # bytes
    host: int = 0  # index into Cluster.hosts
    compute_rate: float = 1.0   # compute-bound ops (pardnn.graph.op_rates), relative to the costs' device
    memory_rate: float = 1.0    # every other op, relative likewise
    host_tier: bool = False     # the host's CPU with the system's memory (`+host`, `--host-memory`)
    memory_bandwidth: float = 0.0   # bytes per us of its memory when stated (0: not stated);
    #                                 no link to or from it may be faster


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

    # ------------------------------------------------------------ rates
    @cached_property
    def rates(self) -> np.ndarray:
        """(2, K) float: row 0 each device's compute rate, row 1 its memory rate
        (pardnn.graph.op_rates: row c serves ops of class c)."""
        return np.array([[d.compute_rate for d in self.devices], [d.memory_rate for d in self.devices]], float)

    @cached_property
    def time_scale(self) -> np.ndarray:
        """(2, K) float: what an op's profiled time is multiplied by on each device, 1 / rates."""
        return 1.0 / self.rates

    @cached_property
    def uniform(self) -> bool:
        """True when every device runs ops at the profiled speed (every rate 1): costs
        are used as they are, bit for bit, as before devices had rates."""
        return bool(np.all(self.rates == 1.0))

    @cached_property
    def mixed(self) -> bool:
        """True when the devices differ in speed (two rate pairs or more)."""
        return len(set(zip(*self.rates.tolist()))) > 1

    @cached_property
    def tiers(self) -> np.ndarray:
        """int64 per device: 0 for the fastest devices (by compute rate, then memory
        rate), 1 for the next, ...; all 0 when the devices are alike."""
        pairs = sorted(set(zip(*self.rates.tolist())), key=lambda p: (-p[0], -p[1]))
        rank = {p: i for i, p in enumerate(pairs)}
        return np.array([rank[p] for p in zip(*self.rates.tolist())], np.int64)

    def fastest(self) -> tuple:
        """(cluster, index): the cluster of the fastest devices alone (tier 0: alike in
        speed), with the links among them, and each one's index here. The placers that
        cost every device alike place on it (pardnn.placers.registry)."""
        index = np.flatnonzero(self.tiers == 0)
        return self.subset(index), index

    def subset(self, index) -> "Cluster":
        """The cluster of the devices `index` (in that order), the links among them and
        the hosts they sit on, renumbered in order of first use."""
        index = np.asarray(index, np.int64)
        hosts = sorted({self.devices[i].host for i in index.tolist()})
        renumber = {h: j for j, h in enumerate(hosts)}
        devices = tuple(replace(self.devices[i], host=renumber[self.devices[i].host]) for i in index.tolist())
        return Cluster(devices, self.latency_us[np.ix_(index, index)], self.bandwidth[np.ix_(index, index)],
                       self.reserve, self.preset, tuple(self.hosts[h] for h in hosts))

    @property
    def host_device(self) -> int:
        """Index of the host tier's device, -1 when the cluster has none."""
        found = [i for i, d in enumerate(self.devices) if d.host_tier]
        return found[0] if found else -1

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

    def with_options(self, memory=None, reserve=None, bandwidth=None, latency=None,
                     host_memory=None) -> "Cluster":
        """A copy with the memory of every device but the host tier's (`--memory`: the
        accelerators'), the host tier's memory (`--host-memory`), the reserve, or all
        links overridden."""
        out = self
        if memory is not None:
            out = replace(out, devices=tuple(d if d.host_tier else replace(d, memory=int(memory))
                                             for d in out.devices))
        if host_memory is not None:
            if not any(d.host_tier for d in out.devices):
                raise UserError(f"--host-memory: {self.preset or 'the cluster'} has no host device; "
                                f"add one with PRESET+host (e.g. dgx-h100+host) or a cluster file's \"host\": true")
            out = replace(out, devices=tuple(replace(d, memory=int(host_memory)) if d.host_tier else d
                                             for d in out.devices))
        if reserve is not None:
            if not 0.0 <= reserve < 1.0:
                raise UserError(f"--reserve: must be in [0, 1), got {reserve}")
            out = replace(out, reserve=float(reserve))
        k = out.num_devices
        if bandwidth is not None:
            out = replace(out, bandwidth=uniform_matrix(k, bandwidth, np.inf))
            check_links(out, "--bandwidth")
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


def check_rate(value, what) -> float:
    """`value` as a rate in [MIN_RATE, MAX_RATE]; UserError naming `what` otherwise (0,
    a negative or absurd number, a string, a boolean, NaN)."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and MIN_RATE <= value <= MAX_RATE
    if not ok:
        raise UserError(f"{what}: {value!r} is no rate; give a number from {MIN_RATE:g} to {MAX_RATE:g}, "
                        f"the device's speed relative to the device the costs came from (1: alike)")
    return float(value)


def check_kind(kind, what) -> str:
    """`kind` upper-cased when TensorFlow places ops on it (KNOWN_KINDS); UserError otherwise."""
    text = str(kind).upper()
    if text not in KNOWN_KINDS:
        raise UserError(f"{what}: unknown device kind {kind!r} (TensorFlow places ops on {', '.join(KNOWN_KINDS)})")
    return text


def check_links(cluster, what) -> None:
    """UserError when a link to or from a device is faster than that device's memory
    (where its `memory_bandwidth` is stated): no copy outruns the memory it reads or writes."""
    for i, d in enumerate(cluster.devices):
        if d.memory_bandwidth <= 0 or cluster.num_devices < 2:
            continue
        off = np.arange(cluster.num_devices) != i
        fastest = max(float(cluster.bandwidth[i, off].max()), float(cluster.bandwidth[off, i].max()))
        if fastest > d.memory_bandwidth:
            raise UserError(f"{what}: a link of {d.name} moves {fastest / 1e3:g} GB/s, faster than its "
                            f"memory ({d.memory_bandwidth / 1e3:g} GB/s); give its links at most that")


def host_memory() -> int:
    return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def uniform_matrix(k, value, diag):
    m = np.full((k, k), float(value))
    np.fill_diagonal(m, diag)
    return m

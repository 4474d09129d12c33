"""Cluster: the K devices a graph is placed on, their memory, and the links between them.

A transfer of `b` bytes from device i to device j costs
`latency_us[i, j] + b / bandwidth[i, j]` microseconds (bandwidth in bytes per us).
Both are K x K matrices, so a topology (NVLink pairs vs PCIe vs network) can be
expressed. `reserve` is the fraction of each device's memory ParDNN keeps free for
fragmentation and temporary buffers (thesis §5.1: 10%, "the only parameter of ParDNN
that needs tuning"); `capacity` is what placements may use.

Presets (figures are per direction; see docs/clusters.md for sources):

| preset     | devices                 | memory   | link                                          | latency |
|------------|-------------------------|----------|-----------------------------------------------|---------|
| cpu:K      | K virtual CPU devices   | host RAM | in-process copy, 10 GB/s                      | 5 us    |
| gpu:K      | K generic PCIe GPUs     | 32 GiB   | PCIe 4.0 x16, 24 GB/s                         | 15 us   |
| dgx1-v100  | 8 x V100-SXM2-32GB      | 32 GiB   | NVLink2 hybrid cube-mesh, 25 GB/s per link    | 10 us   |
|            |                         |          | (1 or 2 links); other pairs PCIe+QPI 10 GB/s  | 25 us   |
| dgx2       | 16 x V100-SXM3-32GB     | 32 GiB   | NVSwitch, 6 NVLink2 links: 150 GB/s           | 10 us   |
| dgx-a100   | 8 x A100-SXM4-40GB      | 40 GiB   | NVSwitch, 12 NVLink3 links: 300 GB/s          | 8 us    |
| dgx-h100   | 8 x H100-SXM5-80GB      | 80 GiB   | NVSwitch, 18 NVLink4 links: 450 GB/s          | 8 us    |

A preset name may take `:K` to use its first K GPUs (`dgx-h100:4`); a bare count
`K` means `gpu:K`; `NxPRESET` (e.g. `2xdgx-h100`) and cluster files describe several
hosts (pardnn.cluster_file).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, replace

import numpy as np

from pardnn.errors import UserError

GiB = 2**30
GBps = 1e3  # 1 GB/s in bytes per microsecond
LOCAL_PREFIX = "/job:localhost/replica:0/task:0/device:"

# NVLink2 links between the 8 GPUs of a DGX-1 (V100), as `nvidia-smi topo -m` shows
# them (NV1 = one link, NV2 = two links, 0 = no NVLink: PCIe switch + QPI).
_DGX1_LINKS = np.array([
    [0, 1, 1, 2, 2, 0, 0, 0],
    [1, 0, 2, 1, 0, 2, 0, 0],
    [1, 2, 0, 2, 0, 0, 1, 0],
    [2, 1, 2, 0, 0, 0, 0, 1],
    [2, 0, 0, 0, 0, 1, 1, 2],
    [0, 2, 0, 0, 1, 0, 2, 1],
    [0, 0, 1, 0, 1, 2, 0, 2],
    [0, 0, 0, 1, 2, 1, 2, 0],
])


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
        return float(self.latency_us[off].mean()), float(1.0 / (1.0 / self.bandwidth[off]).mean())

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
            out = replace(out, bandwidth=_matrix(k, bandwidth, np.inf))
        if latency is not None:
            out = replace(out, latency_us=_matrix(k, latency, 0.0))
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


def _matrix(k, value, diag):
    m = np.full((k, k), float(value))
    np.fill_diagonal(m, diag)
    return m


def _uniform(kind, k, memory, bandwidth, latency, preset):
    devices = tuple(Device(f"{LOCAL_PREFIX}{kind}:{i}", kind, int(memory)) for i in range(k))
    return Cluster(devices, _matrix(k, latency, 0.0), _matrix(k, bandwidth, np.inf), preset=preset)


def _host_memory() -> int:
    return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def _dgx1(k):
    links = _DGX1_LINKS[:k, :k]
    bw = np.where(links > 0, links * 25 * GBps, 10 * GBps).astype(float)
    lat = np.where(links > 0, 10.0, 25.0)
    np.fill_diagonal(bw, np.inf)
    np.fill_diagonal(lat, 0.0)
    devices = tuple(Device(f"{LOCAL_PREFIX}GPU:{i}", "GPU", 32 * GiB) for i in range(k))
    return Cluster(devices, lat, bw, preset="dgx1-v100")


PRESETS = {
    # name: (max devices, builder(K))
    "cpu": (None, lambda k: _uniform("CPU", k, _host_memory(), 10 * GBps, 5.0, f"cpu:{k}")),
    "gpu": (None, lambda k: _uniform("GPU", k, 32 * GiB, 24 * GBps, 15.0, f"gpu:{k}")),
    "dgx1-v100": (8, _dgx1),
    "dgx2": (16, lambda k: _uniform("GPU", k, 32 * GiB, 150 * GBps, 10.0, "dgx2")),
    "dgx-a100": (8, lambda k: _uniform("GPU", k, 40 * GiB, 300 * GBps, 8.0, "dgx-a100")),
    "dgx-h100": (8, lambda k: _uniform("GPU", k, 80 * GiB, 450 * GBps, 8.0, "dgx-h100")),
}


def preset_names() -> list:
    return ["cpu:K", "gpu:K", "dgx1-v100", "dgx2", "dgx-a100", "dgx-h100", "NxPRESET", "cluster.json"]


def parse_devices(spec: str, flag: str = "--devices") -> Cluster:
    """Cluster for a preset name, `cpu:K`, `gpu:K`, `preset:K`, a bare count K,
    `NxPRESET` (N hosts) or the path of a cluster file (pardnn.cluster_file)."""
    from pardnn import cluster_file
    if str(spec).endswith(".json") or os.path.isfile(str(spec)):
        return cluster_file.load(str(spec), flag)
    text = str(spec).strip().lower()
    composed = cluster_file.parse_composed(text, parse_devices, flag)
    if composed is not None:
        return composed
    if re.fullmatch(r"[0-9]+", text):
        text = f"gpu:{text}"
    match = re.fullmatch(r"([a-z0-9-]+?)(?::([0-9]+))?", text)
    if not match or match.group(1) not in PRESETS:
        raise UserError(f"{flag}: unknown device preset {spec!r} (choose from {', '.join(preset_names())}, or a count)")
    name, count = match.group(1), match.group(2)
    limit, builder = PRESETS[name]
    if count is None and limit is None:
        raise UserError(f"{flag}: {name} needs a device count, e.g. {name}:4")
    k = limit if count is None else int(count)
    if k < 1 or (limit is not None and k > limit):
        raise UserError(f"{flag}: {spec!r} asks for {k} devices; {name} has 1 to {limit or 'any number'}")
    return builder(k)

"""The machines pardnn knows by name, in one table: each preset builds a Cluster for K
devices (`--devices`) and names the GPU that `--estimate` costs ops for
(pardnn.hardware.gpu_specs, whose memory size the preset's devices take).

Presets: cpu:K, gpu:K, dgx1-v100, dgx2, dgx-a100, dgx-h100; docs/clusters.md lists each
one's devices, memory, links and latencies (per direction) with their sources.

A preset name may take `:K` to use its first K GPUs (`dgx-h100:4`); a bare count
`K` means `gpu:K`; `NxPRESET` (e.g. `2xdgx-h100`) and cluster files describe several
hosts (pardnn.hardware.cluster_file). `+host` (`dgx-h100+host`, `gpu:4+host`,
`dgx-h100:2+host`) adds the preset's host (pardnn.hardware.host_specs) as one more
device, `/device:CPU:0`, after the GPUs: the system's memory, the host's rates
relative to the preset's GPU, and a PCIe link to each GPU (`with_host`).
"""

from __future__ import annotations

import re
from typing import Callable, NamedTuple

import numpy as np

from pardnn.base.errors import UserError
from pardnn.hardware.cluster import GBps, LOCAL_PREFIX, Cluster, Device, host_memory, uniform_matrix
from pardnn.hardware.gpu_specs import A100_SXM4, H100_SXM5, V100_PCIE, V100_SXM2, V100_SXM3, GpuSpec
from pardnn.hardware.host_specs import EPYC_7742, XEON_6248, XEON_8168, XEON_8480C, XEON_E5_2698V4, HostSpec

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


def _uniform(kind, k, memory, bandwidth, latency, preset):
    devices = tuple(Device(f"{LOCAL_PREFIX}{kind}:{i}", kind, int(memory)) for i in range(k))
    return Cluster(devices, uniform_matrix(k, latency, 0.0), uniform_matrix(k, bandwidth, np.inf), preset=preset)


def _gpus(gpu, bandwidth, latency, preset):
    """builder(K): K GPUs of `gpu`'s memory, every pair linked alike."""
    return lambda k: _uniform("GPU", k, gpu.memory_bytes, bandwidth, latency, preset.format(k=k))


def _dgx1(k):
    links = _DGX1_LINKS[:k, :k]
    bw = np.where(links > 0, links * 25 * GBps, 10 * GBps).astype(float)
    lat = np.where(links > 0, 10.0, 25.0)
    np.fill_diagonal(bw, np.inf)
    np.fill_diagonal(lat, 0.0)
    devices = tuple(Device(f"{LOCAL_PREFIX}GPU:{i}", "GPU", V100_SXM2.memory_bytes) for i in range(k))
    return Cluster(devices, lat, bw, preset="dgx1-v100")


class Preset(NamedTuple):
    max_devices: int | None         # None: any K (cpu:K, gpu:K)
    build: Callable                 # K -> Cluster
    gpu: GpuSpec | None             # the GPU `--estimate` costs ops for; None: no GPU
    host: HostSpec | None = None    # what `+host` adds; None: no separate host (cpu:K)


PRESETS = {
    "cpu": Preset(None, lambda k: _uniform("CPU", k, host_memory(), 10 * GBps, 5.0, f"cpu:{k}"), None),
    "gpu": Preset(None, _gpus(V100_PCIE, 24 * GBps, 15.0, "gpu:{k}"), V100_PCIE, XEON_6248),
    "dgx1-v100": Preset(8, _dgx1, V100_SXM2, XEON_E5_2698V4),
    "dgx2": Preset(16, _gpus(V100_SXM3, 150 * GBps, 10.0, "dgx2"), V100_SXM3, XEON_8168),
    "dgx-a100": Preset(8, _gpus(A100_SXM4, 300 * GBps, 8.0, "dgx-a100"), A100_SXM4, EPYC_7742),
    "dgx-h100": Preset(8, _gpus(H100_SXM5, 450 * GBps, 8.0, "dgx-h100"), H100_SXM5, XEON_8480C),
}
HOST_SUFFIX = "+host"


def with_host(cluster, preset: Preset, flag: str = "--devices") -> Cluster:
    """`cluster` (a preset's GPUs) with the preset's host after them: `/device:CPU:0`
    holding the system's memory, running ops at the host's rates relative to the
    preset's GPU, linked to each GPU by the host's PCIe link (both directions)."""
    host, gpu = preset.host, preset.gpu
    if host is None:
        raise UserError(f"{flag}: {cluster.preset.split(':')[0]} has no separate host to add: its devices "
                        f"are the host's CPUs")
    compute, memory = host.rates(gpu)
    device = Device(f"{LOCAL_PREFIX}CPU:0", "CPU", host.memory_bytes, compute_rate=compute, memory_rate=memory,
                    host_tier=True, memory_bandwidth=host.bandwidth_gbs * GBps)
    k = cluster.num_devices
    lat = np.full((k + 1, k + 1), host.link_latency_us)
    bw = np.full((k + 1, k + 1), host.link_gbs * GBps)
    lat[:k, :k], bw[:k, :k] = cluster.latency_us, cluster.bandwidth
    lat[k, k], bw[k, k] = 0.0, np.inf
    return Cluster(cluster.devices + (device,), lat, bw, cluster.reserve, cluster.preset + HOST_SUFFIX,
                   cluster.hosts)


def preset_names() -> list:
    """What `--devices` accepts, for its messages: the presets of PRESETS (`NAME:K` for
    those of any size), then the forms that compose them and the cluster file."""
    return [f"{name}:K" if p.max_devices is None else name for name, p in PRESETS.items()] + [
        f"PRESET{HOST_SUFFIX}", "NxPRESET", "cluster.json"]


def gpu_preset_names() -> list:
    """The presets `--estimate` accepts, for its messages."""
    return [f"{name}:K" if p.max_devices is None else name for name, p in PRESETS.items() if p.gpu is not None]


def estimate_gpu(spec: str, flag: str = "--estimate") -> tuple:
    """(preset name, GpuSpec) for `PRESET`, `PRESET:K`, `gpu`, `gpu:K` or a bare count.

    Only one device is estimated (ops are costed for a single GPU of the preset), so
    a device count is accepted, as `--devices` takes it, and ignored."""
    text = str(spec).strip().lower()
    text = text[:-len(HOST_SUFFIX)] if text.endswith(HOST_SUFFIX) else text    # the GPUs' preset
    if re.fullmatch(r"[0-9]+", text):
        text = f"gpu:{text}"
    match = re.fullmatch(r"([a-z0-9-]+?)(?::[0-9]+)?", text)
    preset = PRESETS.get(match.group(1)) if match else None
    if preset is None or preset.gpu is None:
        raise UserError(f"{flag}: unknown GPU preset {spec!r} (choose from {', '.join(gpu_preset_names())})")
    return match.group(1), preset.gpu

"""The machines pardnn knows by name: each preset builds a Cluster for K devices.

Presets: cpu:K, gpu:K, dgx1-v100, dgx2, dgx-a100, dgx-h100; docs/clusters.md lists each
one's devices, memory, links and latencies (per direction) with their sources.

A preset name may take `:K` to use its first K GPUs (`dgx-h100:4`); a bare count
`K` means `gpu:K`; `NxPRESET` (e.g. `2xdgx-h100`) and cluster files describe several
hosts (pardnn.hardware.cluster_file).
"""

import numpy as np

from pardnn.hardware.cluster import GBps, GiB, LOCAL_PREFIX, Cluster, Device, host_memory, uniform_matrix

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
    "cpu": (None, lambda k: _uniform("CPU", k, host_memory(), 10 * GBps, 5.0, f"cpu:{k}")),
    "gpu": (None, lambda k: _uniform("GPU", k, 32 * GiB, 24 * GBps, 15.0, f"gpu:{k}")),
    "dgx1-v100": (8, _dgx1),
    "dgx2": (16, lambda k: _uniform("GPU", k, 32 * GiB, 150 * GBps, 10.0, "dgx2")),
    "dgx-a100": (8, lambda k: _uniform("GPU", k, 40 * GiB, 300 * GBps, 8.0, "dgx-a100")),
    "dgx-h100": (8, lambda k: _uniform("GPU", k, 80 * GiB, 450 * GBps, 8.0, "dgx-h100")),
}


def preset_names() -> list:
    return ["cpu:K", "gpu:K", "dgx1-v100", "dgx2", "dgx-a100", "dgx-h100", "NxPRESET", "cluster.json"]

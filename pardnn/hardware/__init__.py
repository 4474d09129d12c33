"""The hardware a graph is placed on: devices, their memory and the links between them.

cluster.py (the Cluster type), presets.py (machines known by name), spec.py (`--devices`),
cluster_file.py (multi-host cluster files), hosts.py (one host's devices, replicas'
devices), link_fit.py (fitting measured transfers) and gpu_specs.py (GPU figures for
estimated op costs).
"""

from pardnn.hardware.cluster import GBps, GiB, LOCAL_PREFIX, Cluster, Device, Host
from pardnn.hardware.spec import cluster_from_flags, parse_devices

__all__ = ["GBps", "GiB", "LOCAL_PREFIX", "Cluster", "Device", "Host", "cluster_from_flags", "parse_devices"]

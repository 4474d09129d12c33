"""The hardware a graph is placed on: devices, their memory and the links between them.

cluster.py (the Cluster type), presets.py (machines known by name), spec.py (`--devices`),
cluster_file.py (multi-host cluster files), hosts.py (one host's devices, replicas'
devices), link_fit.py (fitting measured transfers) and gpu_specs.py (GPU figures for
estimated op costs).
"""

from pardnn.hardware.cluster import KNOWN_KINDS, GBps, GiB, LOCAL_PREFIX, Cluster, Device, Host
from pardnn.hardware.presets import PRESETS, Preset, preset_names
from pardnn.hardware.spec import cluster_from_flags, parse_devices

__all__ = ["GBps", "GiB", "KNOWN_KINDS", "LOCAL_PREFIX", "PRESETS", "Cluster", "Device", "Host", "Preset",
           "cluster_from_flags", "parse_devices", "preset_names"]

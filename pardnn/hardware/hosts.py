"""The hosts of a cluster: one host's devices as a cluster of their own, and where each
replica of data parallelism runs (`--replicas R`, docs/multihost.md: replica r runs on
host r with the same local devices as host 0)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from pardnn.base.errors import UserError
from pardnn.hardware.cluster import Cluster


def host_cluster(cluster, h: int) -> Cluster:
    """The single-host cluster of host `h`'s devices and the links among them."""
    idx = np.flatnonzero(cluster.host_of == h)
    devices = tuple(replace(cluster.devices[i], host=0) for i in idx)
    return Cluster(devices, cluster.latency_us[np.ix_(idx, idx)], cluster.bandwidth[np.ix_(idx, idx)],
                   cluster.reserve, cluster.preset, (cluster.hosts[h],))


def replica_cluster(cluster, replicas: int):
    """The first host's cluster, which one replica is placed on; UserError when the
    cluster cannot take `replicas` replicas (see replica_devices)."""
    if replicas < 1:
        raise UserError(f"--replicas: need at least 1 replica, got {replicas}")
    replica_devices(cluster, replicas)
    return host_cluster(cluster, 0)


def replica_devices(cluster, replicas: int) -> np.ndarray:
    """(R, D) device index of local device j of host 0 on host r; UserError when the
    cluster has fewer hosts than replicas or a host lacks one of host 0's devices."""
    hosts = len(cluster.hosts)
    if replicas > hosts:
        raise UserError(f"--replicas: {replicas} replicas need {replicas} hosts; "
                        f"--devices has {hosts} ({', '.join(h.task for h in cluster.hosts)})")
    local = {}
    for i, d in enumerate(cluster.devices):
        local[d.host, d.name.rsplit("/device:", 1)[1].upper()] = i
    first = [d.name.rsplit("/device:", 1)[1].upper() for d in cluster.devices if d.host == 0]
    table = np.empty((replicas, len(first)), np.int64)
    for r in range(replicas):
        for j, short in enumerate(first):
            if (r, short) not in local:
                raise UserError(f"--replicas: host {cluster.hosts[r].task} has no {short}, "
                                f"which host {cluster.hosts[0].task} has; replicas need alike hosts")
            table[r, j] = local[r, short]
    return table

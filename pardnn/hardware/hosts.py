"""The hosts of a cluster: one host's devices as a cluster of their own, and where each
replica of data parallelism runs (`--replicas R`, docs/multihost.md): on a cluster of
several hosts replica r runs on host r with the same local devices as host 0; on one
host (a DGX) the devices are cut in order into R groups of K/R, and replica r takes
group r, as RaNNC replicates a stage over devices of one host (shared/papers 000)."""

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


def first_devices(cluster, k: int) -> Cluster:
    """The cluster of the first k devices of `cluster` (their links and hosts)."""
    hosts = cluster.hosts[:max(d.host for d in cluster.devices[:k]) + 1]
    return replace(cluster, devices=cluster.devices[:k], latency_us=cluster.latency_us[:k, :k].copy(),
                   bandwidth=cluster.bandwidth[:k, :k].copy(), hosts=hosts)


def counted_devices(cluster, k: int) -> Cluster:
    """What a count of k devices means (`pardnn capacity`): the first k devices, or on
    a cluster with a host tier the first k of the others, with the host tier beside
    them (a count of GPUs, each with the host's memory behind it)."""
    tier = [i for i, d in enumerate(cluster.devices) if d.host_tier]
    if not tier:
        return first_devices(cluster, k)
    others = [i for i, d in enumerate(cluster.devices) if not d.host_tier]
    return cluster.subset(others[:k] + tier)


def accelerators(cluster) -> int:
    """The devices a count may take: all of them, less the host tier."""
    return sum(1 for d in cluster.devices if not d.host_tier)


def replica_cluster(cluster, replicas: int):
    """The cluster one replica is placed on: the first host's, or on one host the first
    K/R devices; UserError when the cluster cannot take `replicas` replicas (see
    replica_devices)."""
    if replicas < 1:
        raise UserError(f"--replicas: need at least 1 replica, got {replicas}")
    table = replica_devices(cluster, replicas)
    return host_cluster(cluster, 0) if len(cluster.hosts) > 1 else first_devices(cluster, table.shape[1])


def replica_devices(cluster, replicas: int) -> np.ndarray:
    """(R, D) device index of replica r's device j, where replica 0's devices are those
    the placement is made on (module docstring); UserError when the cluster cannot
    take them: fewer hosts than replicas, a host without one of host 0's devices, or
    on one host a device count R does not divide, or a host tier."""
    if len(cluster.hosts) == 1:
        return _groups(cluster, replicas)
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


def _groups(cluster, replicas: int) -> np.ndarray:
    """replica_devices on one host: R groups of K/R devices, in order."""
    k = cluster.num_devices
    if cluster.host_device >= 0 and replicas > 1:
        raise UserError(f"--replicas: {replicas} replicas on one host cannot share its host tier "
                        f"({cluster.names[cluster.host_device]}); place without the host, or without --replicas")
    if replicas > k or k % replicas:
        raise UserError(f"--replicas: {replicas} replicas on one host need a device count that {replicas} divides; "
                        f"--devices has {k} device{'s' * (k != 1)}")
    return np.arange(k, dtype=np.int64).reshape(replicas, k // replicas)

"""Multi-host clusters: cluster files and composed presets such as `2xdgx-h100`.

A cluster file (JSON, documented in docs/clusters.md) lists hosts — the TF task
prefix (`/job:worker/task:i`) and the address of its `tf.distribute.Server` — with
their devices and memory, plus latency and bandwidth inside a host and between
hosts. The result is a hierarchical link matrix: a device pair on one host uses the
intra-host link, a pair on two hosts the inter-host link. `pardnn links` writes
files with an explicit measured matrix (`links`), which then overrides both.

`NxPRESET` (e.g. `2xdgx-h100`) puts N copies of a single-host preset on hosts
`/job:worker/task:0..N-1` joined by the default inter-host link below.
"""

from __future__ import annotations

import os
import re
from dataclasses import replace

import numpy as np

from pardnn.hardware.cluster import GBps, Cluster, Device, Host, check_device_count
from pardnn.base.errors import UserError
from pardnn.base.jsonfile import read_json, write_json
from pardnn.base.units import MAX_SIZE, MAX_TIME_US, MIN_RATE_BPS, parse_rate, parse_size, parse_time

CLUSTER_FORMAT = "pardnn-cluster"
CLUSTER_VERSION = 1
# One HDR InfiniBand 200 Gb/s port per host (25 GB/s); gRPC/RDMA latency.
INTER_HOST_BANDWIDTH = 25 * GBps
INTER_HOST_LATENCY_US = 10.0


def worker_task(i: int) -> str:
    return f"/job:worker/task:{i}"


def compose(cluster: Cluster, copies: int, inter_latency=INTER_HOST_LATENCY_US,
            inter_bandwidth=INTER_HOST_BANDWIDTH, addresses=None) -> Cluster:
    """`copies` hosts, each a copy of single-host `cluster`, joined by one link kind."""
    k = cluster.num_devices
    hosts = tuple(Host(worker_task(h), (addresses or [""] * copies)[h]) for h in range(copies))
    devices = tuple(
        replace(d, name=f"{hosts[h].task}/device:{d.kind}:{_local_index(d)}", host=h)
        for h in range(copies) for d in cluster.devices)
    host_of = np.repeat(np.arange(copies), k)
    same = host_of[:, None] == host_of[None, :]
    lat = np.where(same, np.tile(cluster.latency_us, (copies, copies)), inter_latency)
    bw = np.where(same, np.tile(cluster.bandwidth, (copies, copies)), inter_bandwidth)
    np.fill_diagonal(lat, 0.0)
    np.fill_diagonal(bw, np.inf)
    return Cluster(devices, lat, bw, cluster.reserve, f"{copies}x{cluster.preset}", hosts)


def _local_index(device) -> str:
    return device.name.rsplit(":", 1)[1]


def parse_composed(text: str, parse_single, flag: str):
    """Cluster for `NxPRESET`, or None when text has no `Nx` prefix."""
    match = re.fullmatch(r"([0-9]+)x(.+)", text)
    if not match:
        return None
    copies = int(match.group(1))
    if copies < 1:
        raise UserError(f"{flag}: {text!r} asks for {copies} hosts")
    if re.fullmatch(r"[0-9]+x.+", match.group(2)):
        raise UserError(f"{flag}: {text!r} composes hosts twice; give NxPRESET once (e.g. 4xdgx-h100)")
    single = parse_single(match.group(2), flag)
    check_device_count(copies * single.num_devices, flag, text)
    return compose(single, copies)


# ------------------------------------------------------------------ files
def load(path: str, flag: str = "--devices") -> Cluster:
    """Read a cluster file; UserError naming the file and the field on any problem."""
    doc = read_json(path, prefix=f"{flag}: cluster file ")
    if not isinstance(doc, dict) or doc.get("format") != CLUSTER_FORMAT or doc.get("version") != CLUSTER_VERSION:
        raise UserError(f"{flag}: {path} is not a pardnn cluster file (format {CLUSTER_FORMAT!r}, version {CLUSTER_VERSION})")
    try:
        return _from_doc(doc, os.path.basename(path))
    except (KeyError, TypeError, ValueError, IndexError, AttributeError) as exc:
        raise UserError(f"{flag}: {path}: malformed cluster file ({type(exc).__name__}: {exc})") from None
    except UserError as exc:
        raise UserError(f"{flag}: {path}: {exc}") from None


def _from_doc(doc, name) -> Cluster:
    hosts, devices = [], []
    check_device_count(sum(len(host["devices"]) for host in doc["hosts"]), "devices", name)
    for h, host in enumerate(doc["hosts"]):
        hosts.append(Host(host["task"], host.get("address", "")))
        for dev in host["devices"]:
            kind, index = dev["name"].upper().replace("/DEVICE:", "").split(":")
            devices.append(Device(f"{host['task']}/device:{kind}:{int(index)}", kind,
                                  parse_size(dev["memory"], "memory"), h))
    if not devices:
        raise UserError("lists no devices")
    if len({d.name for d in devices}) < len(devices):
        raise UserError("lists a device twice")
    host_of = np.array([d.host for d in devices])
    same = host_of[:, None] == host_of[None, :]
    intra, inter = doc.get("intra_host", {}), doc.get("inter_host", {})
    lat = np.where(same, parse_time(intra.get("latency", "10us"), "intra_host.latency"),
                   parse_time(inter.get("latency", f"{INTER_HOST_LATENCY_US}us"), "inter_host.latency"))
    bw = np.where(same, parse_rate(intra.get("bandwidth", "24GB/s"), "intra_host.bandwidth"),
                  parse_rate(inter.get("bandwidth", "25GB/s"), "inter_host.bandwidth"))
    if "links" in doc:
        k = len(devices)
        lat = np.array(doc["links"]["latency_us"], float).reshape(k, k)
        bw = np.array(doc["links"]["bandwidth_bytes_per_us"], float).reshape(k, k)
    off = ~np.eye(len(devices), dtype=bool)
    # the ranges the flags and intra_host/inter_host accept (pardnn.base.units)
    if not (np.all((bw[off] >= MIN_RATE_BPS / 1e6) & (bw[off] <= MAX_SIZE / 1e6))
            and np.all((lat[off] >= 0) & (lat[off] <= MAX_TIME_US))):
        raise UserError("links need bandwidths of 1 B/s to 1 EiB/s (1e-6 to 1.15e12 bytes per us) "
                        "and latencies of 0 to one day (8.64e10 us)")
    np.fill_diagonal(lat, 0.0)
    np.fill_diagonal(bw, np.inf)
    reserve = float(doc.get("reserve", 0.10))
    if not 0.0 <= reserve < 1.0:
        raise UserError(f"reserve must be in [0, 1), got {reserve}")
    return Cluster(tuple(devices), lat, bw, reserve, name, tuple(hosts))


def to_doc(cluster: Cluster) -> dict:
    """The cluster file for `cluster`, with its full link matrix under `links`."""
    hosts = []
    for h, host in enumerate(cluster.hosts):
        devs = [{"name": d.name.rsplit("/device:", 1)[1], "kind": d.kind, "memory": int(d.memory)}
                for d in cluster.devices if d.host == h]
        hosts.append({"task": host.task, "address": host.address, "devices": devs})
    lat = cluster.latency_us.copy()
    bw = np.where(np.isinf(cluster.bandwidth), 0.0, cluster.bandwidth)
    return {"format": CLUSTER_FORMAT, "version": CLUSTER_VERSION, "reserve": cluster.reserve,
            "hosts": hosts,
            "links": {"latency_us": lat.tolist(), "bandwidth_bytes_per_us": bw.tolist()}}


def save(cluster: Cluster, path: str) -> None:
    """Write a cluster file (temp file, then rename)."""
    write_json(to_doc(cluster), path)

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

from pardnn.hardware.cluster import (GBps, Cluster, Device, Host, check_device_count, check_kind, check_links,
                                     check_rate)
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
    own_links = []
    for h, host in enumerate(doc["hosts"]):
        hosts.append(Host(host["task"], host.get("address", "")))
        for dev in host["devices"]:
            devices.append(_device(dev, host["task"], h, f"devices[{len(devices)}]"))
            own_links.append(_own_link(dev.get("link"), f"{devices[-1].name}: link"))
    if not devices:
        raise UserError("lists no devices")
    if len({d.name for d in devices}) < len(devices):
        raise UserError("lists a device twice")
    tiers = [d.host for d in devices if d.host_tier]
    if len(set(tiers)) < len(tiers):
        raise UserError("marks two devices of one host \"host\": true; a host has one host device")
    host_of = np.array([d.host for d in devices])
    same = host_of[:, None] == host_of[None, :]
    intra, inter = doc.get("intra_host", {}), doc.get("inter_host", {})
    lat = np.where(same, parse_time(intra.get("latency", "10us"), "intra_host.latency"),
                   parse_time(inter.get("latency", f"{INTER_HOST_LATENCY_US}us"), "inter_host.latency"))
    bw = np.where(same, parse_rate(intra.get("bandwidth", "24GB/s"), "intra_host.bandwidth"),
                  parse_rate(inter.get("bandwidth", "25GB/s"), "inter_host.bandwidth"))
    lat, bw = _with_own_links(lat, bw, same, own_links)
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
    cluster = Cluster(tuple(devices), lat, bw, reserve, name, tuple(hosts))
    check_links(cluster, "links")
    return cluster


def _device(dev, task, h, where) -> Device:
    """One entry of a host's `devices`: its name (and `kind`, which must agree) and
    memory, and optionally its `rate` (a number for every op, or {"compute": x,
    "memory": y}), `host` (true for the host tier, a CPU) and `memory_bandwidth` (a
    rate, which its links may not pass)."""
    kind, index = dev["name"].upper().replace("/DEVICE:", "").split(":")
    kind = check_kind(kind, f"{where}.name")
    if "kind" in dev and check_kind(dev["kind"], f"{where}.kind") != kind:
        raise UserError(f"{where}.kind: {dev['kind']!r} is not the kind its name {dev['name']!r} gives")
    rate = dev.get("rate", 1.0)
    if isinstance(rate, dict):
        unknown = set(rate) - {"compute", "memory"}
        if unknown:
            raise UserError(f"{where}.rate: unknown field {sorted(unknown)[0]!r} (give compute and memory)")
        compute, memory = rate.get("compute", 1.0), rate.get("memory", 1.0)
    else:
        compute = memory = rate
    host_tier = dev.get("host", False)
    if not isinstance(host_tier, bool):
        raise UserError(f"{where}.host: give true or false, not {host_tier!r}")
    if host_tier and kind != "CPU":
        raise UserError(f"{where}.host: the host device is the host's CPU, not a {kind}")
    bandwidth = dev.get("memory_bandwidth")
    return Device(f"{task}/device:{kind}:{int(index)}", kind, parse_size(dev["memory"], f"{where}.memory"), h,
                  compute_rate=check_rate(compute, f"{where}.rate.compute"),
                  memory_rate=check_rate(memory, f"{where}.rate.memory"), host_tier=host_tier,
                  memory_bandwidth=0.0 if bandwidth is None else parse_rate(bandwidth, f"{where}.memory_bandwidth"))


def _own_link(link, where):
    """(latency_us, bytes per us) of a device's own `link` to the others on its host, or None."""
    if link is None:
        return None
    return parse_time(link.get("latency", "10us"), f"{where}.latency"), parse_rate(link["bandwidth"], f"{where}.bandwidth")


def _with_own_links(lat, bw, same, own_links):
    """The intra-host links with each device's own `link` (the host's PCIe, say) on its
    pairs: where both ends state one, the slower bandwidth and the longer latency."""
    lat, bw = lat.astype(float), bw.astype(float)
    for i, link in enumerate(own_links):
        if link is None:
            continue
        for j in np.flatnonzero(same[i]).tolist():
            if j == i:
                continue
            other = own_links[j]
            latency = link[0] if other is None else max(link[0], other[0])
            rate = link[1] if other is None else min(link[1], other[1])
            lat[i, j] = lat[j, i] = latency
            bw[i, j] = bw[j, i] = rate
    return lat, bw


def to_doc(cluster: Cluster) -> dict:
    """The cluster file for `cluster`, with its full link matrix under `links`."""
    hosts = []
    for h, host in enumerate(cluster.hosts):
        devs = [_device_doc(d) for d in cluster.devices if d.host == h]
        hosts.append({"task": host.task, "address": host.address, "devices": devs})
    lat = cluster.latency_us.copy()
    bw = np.where(np.isinf(cluster.bandwidth), 0.0, cluster.bandwidth)
    return {"format": CLUSTER_FORMAT, "version": CLUSTER_VERSION, "reserve": cluster.reserve,
            "hosts": hosts,
            "links": {"latency_us": lat.tolist(), "bandwidth_bytes_per_us": bw.tolist()}}


def _device_doc(device) -> dict:
    """A device's entry, with its rate, host tier and memory bandwidth where they are not the defaults."""
    doc = {"name": device.name.rsplit("/device:", 1)[1], "kind": device.kind, "memory": int(device.memory)}
    if (device.compute_rate, device.memory_rate) != (1.0, 1.0):
        doc["rate"] = {"compute": device.compute_rate, "memory": device.memory_rate}
    if device.host_tier:
        doc["host"] = True
    if device.memory_bandwidth > 0:
        doc["memory_bandwidth"] = f"{device.memory_bandwidth * 1e6:.17g}B/s"
    return doc


def save(cluster: Cluster, path: str) -> None:
    """Write a cluster file (temp file, then rename)."""
    write_json(to_doc(cluster), path)

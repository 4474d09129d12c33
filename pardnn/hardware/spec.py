"""`--devices SPEC`: a preset name, `cpu:K`, `gpu:K`, `preset:K`, a bare count, each
optionally with `+host`, `NxPRESET` or a cluster file, turned into a Cluster."""

import os
import re

from pardnn.base.errors import UserError
from pardnn.hardware.cluster_file import load, parse_composed
from pardnn.hardware.cluster import Cluster, check_device_count
from pardnn.hardware.presets import HOST_SUFFIX, PRESETS, preset_names, with_host
from pardnn.base.units import parse_rate, parse_size, parse_time


def parse_devices(spec: str, flag: str = "--devices") -> Cluster:
    """Cluster for a preset name, `cpu:K`, `gpu:K`, `preset:K`, a bare count K, each
    optionally with `+host` (the preset's host as one more device), `NxPRESET` (N
    hosts) or the path of a cluster file (pardnn.hardware.cluster_file)."""
    if str(spec).endswith(".json") or os.path.isfile(str(spec)):
        return load(str(spec), flag)
    text = str(spec).strip().lower()
    composed = parse_composed(text, parse_devices, flag)
    if composed is not None:
        return composed
    host = text.endswith(HOST_SUFFIX)
    text = text[:-len(HOST_SUFFIX)] if host else text
    if re.fullmatch(r"[0-9]+", text):
        text = f"gpu:{text}"
    match = re.fullmatch(r"([a-z0-9-]+?)(?::([0-9]+))?", text)
    if not match or match.group(1) not in PRESETS:
        raise UserError(f"{flag}: unknown device preset {spec!r} (choose from {', '.join(preset_names())}, or a count)")
    name, count = match.group(1), match.group(2)
    limit, builder = PRESETS[name].max_devices, PRESETS[name].build
    if count is None and limit is None:
        raise UserError(f"{flag}: {name} needs a device count, e.g. {name}:4")
    k = limit if count is None else int(count)
    if k < 1 or (limit is not None and k > limit):
        raise UserError(f"{flag}: {spec!r} asks for {k} devices; {name} has 1 to {limit or 'any number'}")
    check_device_count(k + host, flag, spec)
    return with_host(builder(k), PRESETS[name], flag) if host else builder(k)


def cluster_from_flags(devices, memory=None, reserve=None, bandwidth=None, latency=None,
                       host_memory=None) -> Cluster:
    """The cluster the cluster flags give (`--devices`, `--memory`, `--reserve`,
    `--bandwidth`, `--latency`, `--host-memory`; None: the preset's or cluster file's
    own), as `place` reads them from its command line and `explain` from a placed
    folder's inputs.json."""
    return parse_devices(devices).with_options(
        memory=None if memory is None else parse_size(memory, "--memory"),
        reserve=reserve,
        bandwidth=None if bandwidth is None else parse_rate(bandwidth, "--bandwidth"),
        latency=None if latency is None else parse_time(latency, "--latency"),
        host_memory=None if host_memory is None else parse_size(host_memory, "--host-memory"))

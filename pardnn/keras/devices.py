"""The cluster a Keras plan places on: `devices` as `pardnn place --devices` reads it,
and `memory`, where "auto" is the devices' real memory."""

from __future__ import annotations

import re

from pardnn.base.errors import UserError
from pardnn.hardware import parse_devices
from pardnn.hardware.cluster import host_memory
from pardnn.hardware.presets import estimate_gpu
from pardnn.tf.plan_devices import gpu_memory
from pardnn.base.units import MAX_SIZE, parse_size

DEFAULT_ESTIMATE = "dgx-h100"


def plan_cluster(devices, memory="auto", reserve=None):
    """The Cluster of `devices` (a preset, cpu:K, gpu:K, a cluster file: as --devices)
    with `memory` per device: "auto", a size ("16GiB") or bytes, and the `reserve`."""
    cluster = parse_devices(devices, "devices")
    if reserve is not None and (isinstance(reserve, bool) or not isinstance(reserve, (int, float))
                                or not 0.0 <= reserve < 1.0):
        raise UserError(f"reserve: must be a fraction in [0, 1), got {reserve!r}")
    return cluster.with_options(memory=_memory(devices, cluster, memory), reserve=reserve)


def _memory(devices, cluster, memory):
    """Bytes per device; None keeps the preset's or cluster file's (their real memory)."""
    if memory is None or (isinstance(memory, str) and memory.strip().lower() == "auto"):
        return auto_memory(devices, cluster.num_devices)
    if isinstance(memory, bool) or not isinstance(memory, (int, str)):
        raise UserError(f"memory: give 'auto', a size such as '16GiB', or bytes; got {memory!r}")
    nbytes = parse_size(memory, "memory") if isinstance(memory, str) else memory
    if not 1 <= nbytes <= MAX_SIZE:
        raise UserError(f"memory: {memory!r} bytes is not a size from 1 B to 1 EiB")
    return nbytes


def auto_memory(devices, count):
    """The real memory of `count` devices of `devices`: K logical CPU devices share the
    host's memory (a K-th each); K GPUs of this process, what TensorFlow may allocate
    on the smallest; a preset's or cluster file's devices, theirs (None)."""
    text = str(devices).strip().lower()
    if re.fullmatch(r"cpu:[0-9]+", text):
        return host_memory() // count
    if re.fullmatch(r"(gpu:)?[0-9]+", text):
        have = gpu_memory()
        if len(have) < count:
            raise UserError(f"memory: 'auto' reads the memory of this process's GPUs, and {devices!r} asks "
                            f"for {count}; this process has {len(have)}. Give memory=SIZE to plan for "
                            f"another machine")
        return min(have[:count])
    return None


def estimate_preset(devices, estimate=None) -> str:
    """The GPU preset whose ops the plan's estimate costs: `estimate` if given, else
    `devices` when it names GPUs of a preset, else dgx-h100 (for cpu:K and files)."""
    if estimate is not None:
        return estimate
    try:
        estimate_gpu(str(devices), "devices")
    except UserError:
        return DEFAULT_ESTIMATE
    return str(devices)

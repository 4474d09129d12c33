"""Memory a traced TensorFlow step really allocated on each device, from the
allocation records in its RunMetadata (`trace_level=FULL_TRACE`).

Each op's allocator records say when it allocated and freed how many bytes; summed
in time order per device, their running total is what that device held above what
it held before the step, and its highest point is the step's peak there. It leaves
out what lives across steps (variables and optimizer slots, allocated when they
were initialised): add the resident state to compare with the emulator's peak.
Every CPU device of a process shares one host allocator, but each record belongs to
the op that allocated it, and so to that op's device. On a GPU only its own
allocator ("GPU_i_bfc") counts, not the pinned host memory the GPU's ops also use.
"""

from __future__ import annotations

import re
from collections import defaultdict

import numpy as np


HOST = "host allocator (all CPU devices)"


def step_peaks(step_stats) -> dict:
    """{device name as step stats give it, less any stream suffix: peak bytes its ops
    allocated during the step}, plus HOST: the peak of the one allocator all CPU
    devices share, which is what the process really held (the CPU devices' own peaks
    come at different times and do not add up to it)."""
    events = allocation_records(step_stats)
    peaks = {device: _peak(records) for device, records in sorted(events.items())}
    cpus = [r for device, records in events.items() if re.search(r"/device:CPU:\d+$", device)
            for r in records]
    if cpus:
        peaks[HOST] = _peak(cpus)
    return peaks


def allocation_records(step_stats) -> dict:
    """{device name less any stream suffix: [(micros, bytes)] of its ops' allocation
    records (bytes < 0 for a free)}, as `step_peaks` counts them."""
    events = defaultdict(list)
    for dev in step_stats.dev_stats:
        device = re.sub(r"/stream:.*$|/memcpy$", "", dev.device)
        gpu = re.search(r"GPU:([0-9]+)$", device)
        for node in dev.node_stats:
            for memory in node.memory:
                if gpu and not memory.allocator_name.startswith(f"GPU_{gpu.group(1)}_"):
                    continue
                events[device] += [(r.alloc_micros, r.alloc_bytes) for r in memory.allocation_records]
    return dict(events)


def in_use(records):
    """(times, bytes in use from each time on) of (time, bytes) records, one point
    per record in time order; at one instant frees go first."""
    records = sorted(records)
    return (np.asarray([t for t, _ in records], float),
            np.cumsum(np.asarray([b for _, b in records], np.int64)))


def _peak(records) -> int:
    """Highest running total of (time, bytes) records."""
    return int(max(in_use(records)[1].max(initial=0), 0))

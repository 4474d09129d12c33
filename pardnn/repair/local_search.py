"""The repair's last resort (docs/repair.md): a local search over the groups' devices,
each trial judged by a full emulation, when the greedy rounds are stuck and the
complete search (pardnn.repair.exhaustive) does not apply or found nothing within
its limit.

The greedy rounds move each group once, cheapest per byte freed first, and estimate
the targets' timelines between emulations; near the least memory a placement needs
they stop where moving a group already moved, or a move that overflows another
device a little while it frees more here, would lead to a fit. This search measures
instead of estimating: at the highest overflow (the device most over its capacity,
at its peak), it tries moving the groups holding the most there (their outputs and
the inputs they free, alive at that instant, and what runs then), largest first,
each to the other devices in increasing order of their peak, and keeps the first
move that lowers the total overflow (the sum over devices of peak minus capacity,
where positive); then again from the new emulation, until nothing overflows or no
move helps. Any group may move, again. The work limit counts nodes and edges
emulated, not time, so the answer is the same on every machine.
"""

from __future__ import annotations

import numpy as np

WORK_LIMIT = 3_000_000      # nodes + edges emulated: about 600 emulations of a 2,000-node graph


def descend(graph, cluster, group_dev, allowed, emulate, limit=None):
    """A group placement (int per group) that fits every device, found from
    `group_dev` as the module docstring says, or None. `allowed` is groups x devices
    (pins); `emulate(device per node)` gives the (schedule, memory profile) of a
    placement; `limit`: the work allowed (None: WORK_LIMIT)."""
    limit = WORK_LIMIT if limit is None else limit
    cap = cluster.capacity.astype(np.int64)
    group_dev = np.asarray(group_dev, np.int64).copy()
    cost = graph.num_nodes + graph.num_edges + 1
    work = cost
    schedule, profile = emulate(group_dev[graph.group])
    over = _overflow(profile.peak_bytes, cap)
    while over > 0:
        d = int(np.argmax(profile.peak_bytes - cap))
        improved = False
        for g in _holders(graph, group_dev, schedule, profile, d):
            for e in np.lexsort((np.arange(len(cap)), profile.peak_bytes)).tolist():
                if e == d or not allowed[g, e]:
                    continue
                if work + cost > limit:
                    return None
                work += cost
                trial = group_dev.copy()
                trial[g] = e
                trial_schedule, trial_profile = emulate(trial[graph.group])
                trial_over = _overflow(trial_profile.peak_bytes, cap)
                if trial_over < over:
                    group_dev, schedule, profile, over = trial, trial_schedule, trial_profile, trial_over
                    improved = True
                    break
            if improved:
                break
        if not improved:
            return None
    return group_dev


def _overflow(peaks, cap) -> int:
    return int(np.maximum(peaks - cap, 0).sum())


def _holders(graph, group_dev, schedule, profile, d) -> list:
    """The groups on device d holding bytes at its peak, most first (ties: lower id):
    per buffer alive then, its producer's group and the group of the consumer whose
    finish frees it, when on d; and the running ops' outputs and scratch."""
    t = profile.peak_time_us[d]
    alive = np.flatnonzero((profile.buf_device == d) & (profile.buf_alloc <= t) & (t < profile.buf_free))
    held = np.zeros(graph.num_groups, np.int64)
    for column in (profile.buf_node[alive], profile.buf_owner[alive]):
        known = column >= 0
        groups = graph.group[column[known]]
        here = group_dev[groups] == d
        np.add.at(held, groups[here], profile.buf_bytes[alive][known][here])
    running = np.flatnonzero((schedule.start <= t) & (t < schedule.finish) & (group_dev[graph.group] == d))
    np.add.at(held, graph.group[running], graph.out_bytes[running] + graph.temp_bytes[running])
    groups = np.flatnonzero(held > 0)
    return groups[np.lexsort((groups, -held[groups]))].tolist()

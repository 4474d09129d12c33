"""m-TOPO (Baechi, Jeon et al. 2020): fill the devices in topological order.

Colocation groups are taken in the topological order of their first members and
poured into device 0 until it holds its share of the memory, then device 1, and so
on. As in Baechi, a device's share is the graph's total memory divided by K plus
the largest group's memory (so the last device is not left with a sliver), capped
by the device's capacity; memory is the static estimate of every byte a node would
ever hold (resident state plus output), nothing freed. The result is a pipeline of
K contiguous stages.

A group pinned to a device kind goes to the first device of that kind, at or after
the current one, that still has room, without moving the fill pointer. A group that
fits nowhere goes to the allowed device with the most room left (the placement is
then reported infeasible by the emulator rather than refused here).
"""

import numpy as np

from pardnn.graph.node_memory import node_memory
from pardnn.graph.constraints import allowed_devices


def place(graph, cluster, timings=None) -> np.ndarray:
    rows, row_of = np.unique(allowed_devices(graph, cluster), axis=0, return_inverse=True)
    options = [np.flatnonzero(r).tolist() for r in rows]
    unrestricted = [len(o) == cluster.num_devices for o in options]
    gmem = np.bincount(graph.group, weights=node_memory(graph), minlength=graph.num_groups)
    share = gmem.sum() / cluster.num_devices + (gmem.max() if len(gmem) else 0.0)
    room = np.minimum(cluster.capacity.astype(float), share).tolist()
    group_device = np.empty(graph.num_groups, np.int32)
    current = 0
    for g, (need, r) in enumerate(zip(gmem.tolist(), row_of.reshape(-1).tolist())):
        d = next((x for x in options[r] if x >= current and room[x] >= need), -1)
        if d < 0:
            d = max(options[r], key=room.__getitem__)      # fits nowhere: least overflow
        elif unrestricted[r]:
            current = d
        group_device[g] = d
        room[d] -= need
    return group_device[graph.group]

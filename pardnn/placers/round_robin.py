"""Round-robin placement: colocation groups dealt to devices in topological order.

The simplest placer that obeys every rule; the yardstick ParDNN must beat. A group
pinned to a device kind goes to the next device of that kind in the rotation.
"""

import numpy as np

from pardnn.graph.constraints import allowed_devices


def place(graph, cluster, timings=None) -> np.ndarray:
    allowed = allowed_devices(graph, cluster)
    k = cluster.num_devices
    group_device = np.empty(graph.num_groups, np.int32)
    nxt = 0
    for g in range(graph.num_groups):   # groups are numbered by first member's topo id
        options = np.flatnonzero(allowed[g])
        pick = options[np.searchsorted(options, nxt % k) % len(options)]
        group_device[g] = pick
        nxt = pick + 1
    return group_device[graph.group]

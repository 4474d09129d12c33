"""Lower bounds on the emulated step of one placement, at a fraction of an emulation's
cost, so that refinement can drop trials that cannot win without emulating them
(pardnn.emulator.trial.emulate tries the cheaper one first).

Under the scheduler's model (pardnn.emulator.scheduler) a device runs one op at a
time, so the step lasts at least the work placed on its busiest device; and a node
starts no earlier than each input arrives, a cross-device input no earlier than its
producer's finish plus the transfer's `bytes / bandwidth + latency`, so the step
lasts at least the costliest path with those transfer costs on the cut edges. Both
ignore queueing and link contention, which only add time.
"""

import numpy as np

from pardnn.emulator.scheduler import plan_transfers
from pardnn.graph.levels import bottom_levels


def busiest_device_us(graph, cluster, device) -> float:
    """The work placed on the busiest device (one bincount, far cheaper than the path)."""
    if graph.num_nodes == 0:
        return 0.0
    return float(np.bincount(np.asarray(device, np.int64), graph.comp_us, minlength=cluster.num_devices).max())


def longest_path_us(graph, cluster, device) -> float:
    """The costliest path, each cut edge costing its transfer's `bytes / bandwidth + latency`."""
    if graph.num_nodes == 0:
        return 0.0
    edge_transfer, _, _, occupancy, latency = plan_transfers(graph, cluster, np.asarray(device, np.int64))
    cross = edge_transfer >= 0
    edge_cost = np.zeros(graph.num_edges)
    edge_cost[cross] = occupancy[edge_transfer[cross]] + latency[edge_transfer[cross]]
    return float(bottom_levels(graph, graph.comp_us, edge_cost).max())

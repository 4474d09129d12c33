"""Communication costs and device masks shared by the ParDNN stages.

An edge costs `latency + bytes / bandwidth` when its ends sit on different devices
(Cluster.comm_us), including a control edge (0 bytes: the latency of the message
that tells the consumer it may run). Before devices are known every edge is
costed on the cluster's mean link (Cluster.mean_link), as the thesis costs edges
"as if" cut when computing levels (Table 4.2); once they are known, on the link
between the two devices, and 0 on one device.
"""

import numpy as np


def mean_edge_costs(graph, cluster) -> np.ndarray:
    """Per edge id: the cost of the edge if cut, on the cluster's mean link."""
    latency, bandwidth = cluster.mean_link()
    if cluster.num_devices < 2:
        return np.zeros(graph.num_edges)
    return latency + graph.edge_bytes / bandwidth


def placed_edge_costs(graph, cluster, device) -> np.ndarray:
    """Per edge id: the cost under a placement (0 where both ends share a device)."""
    ds, dd = device[graph.edge_src], device[graph.edge_dst]
    cross = ds != dd
    cost = np.zeros(graph.num_edges)
    a, b = ds[cross], dd[cross]
    cost[cross] = cluster.latency_us[a, b] + graph.edge_bytes[cross] / cluster.bandwidth[a, b]
    return cost


def group_masks(allowed) -> list:
    """Allowed devices of each group (bool groups x devices) as Python int bit masks."""
    k = allowed.shape[1]
    if allowed.all():
        return [(1 << k) - 1] * allowed.shape[0]
    packed = np.packbits(allowed, axis=1, bitorder="little")
    return [int.from_bytes(row.tobytes(), "little") for row in packed]

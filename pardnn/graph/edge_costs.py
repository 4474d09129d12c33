"""Communication costs shared by the ParDNN stages.

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


def transfers(graph, device):
    """Cross-device tensor transfers as (edge ids, destination devices).

    A tensor (src, slot) is sent once per destination device however many
    consumers it has there; the returned edge is the first such edge."""
    device = np.asarray(device)
    ds, dd = device[graph.edge_src], device[graph.edge_dst]
    cross = np.flatnonzero(ds != dd)
    if len(cross) == 0:
        return cross, cross
    keys = np.stack([graph.edge_src[cross], graph.edge_slot[cross], dd[cross]])
    _, first = np.unique(keys, axis=1, return_index=True)
    eids = cross[np.sort(first)]
    return eids, dd[eids]


def comm_bytes(graph, device) -> int:
    """Bytes crossing devices per step."""
    eids, _ = transfers(graph, device)
    return int(graph.edge_bytes[eids].sum())

"""report.json: what a placement costs, in microseconds and bytes (DESIGN.md).

Fields are filled only by code that computes them; a field nothing computes is
absent, never faked.
"""

import json
import os

import numpy as np


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


def base_report(graph, placement) -> dict:
    cluster = placement.cluster
    return {
        "algorithm": placement.algorithm,
        "num_nodes": graph.num_nodes,
        "num_edges": graph.num_edges,
        "devices": cluster.names,
        "memory_capacity_bytes": [int(x) for x in cluster.memory],
        "reserve": cluster.reserve,
        "nodes_per_device": [int(x) for x in placement.counts()],
        "comm_bytes": comm_bytes(graph, placement.device),
    }


def write_json(doc, path) -> None:
    """Write JSON to path through a temporary file and a rename."""
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=2)
        f.write("\n")
    os.replace(tmp, path)

"""report.json: what a placement costs, in microseconds and bytes (docs/report.md).

Fields are filled only by code that computes them; a field nothing computes is
absent, never faked.
"""

from pardnn.graph.edge_costs import comm_bytes


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

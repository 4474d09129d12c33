"""report.json: what a placement costs, in microseconds and bytes (docs/report.md).

Fields are filled only by code that computes them; a field nothing computes is
absent, never faked.
"""

from pardnn.emulator import report_fields
from pardnn.graph.edge_costs import comm_bytes
from pardnn.placers import exact
from pardnn.repair.least_memory import least_memory


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


def judged_fields(graph, cluster, device, schedule, profile, bound_us=None) -> dict:
    """The emulation's fields (pardnn.emulator.report_fields; `bound_us`, its
    lower_bound_us when known), with lower_bound_us raised to the exact model's proven
    bound where that model runs (small graphs, pardnn.placers.exact): either holds for
    every placement (docs/bounds.md); and least_memory, the memory per device below
    which no placement fits (pardnn.repair.least_memory, docs/bounds.md "Least memory")."""
    fields = report_fields(graph, cluster, device, schedule, profile, bound_us)
    fields["lower_bound_us"] = max(fields["lower_bound_us"], exact.proven_bound_us(graph, cluster))
    fields["least_memory"] = least_memory(graph, cluster.num_devices).fields()
    return fields

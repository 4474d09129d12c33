"""The lower bounds report.json prints, each holding for every placement of the graph
on the cluster (docs/bounds.md): `lower_bound_us` on the emulated step.

It is the largest of the emulator's bounds (pardnn.emulator.lower_bound_us: the critical
path, total work / K, a path with the transfers every placement forces, and on small
graphs the interval bound) and, on graphs the exact model takes (pardnn.placers.exact:
small ones), the model's proven bound, solved once per graph and cluster (the graph's
memo; the exact candidate of `--algorithm pardnn` shares that solve).
"""

from pardnn.emulator import lower_bound_us
from pardnn.placers import exact


def step_lower_bound_us(graph, cluster, emulated_us=None) -> float:
    """report.json's `lower_bound_us`; `emulated_us`: the emulator's part, when a worker
    process found it already."""
    emulated = lower_bound_us(graph, cluster) if emulated_us is None else emulated_us
    return max(emulated, exact.proven_bound_us(graph, cluster))

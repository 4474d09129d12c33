"""Pieces shared by the baseline placers.

The baselines decide per colocation group: a group's device is fixed by the first
of its members that a placer handles, and every later member follows it. Groups
cannot simply be contracted into single nodes for the list schedulers, because a
group such as {variable, its read, its optimizer apply} would then form a cycle
with the ops between its members.
"""

import numpy as np

from pardnn.graph.constraints import allowed_devices


def link_tables(cluster) -> tuple:
    """(latency, 1/bandwidth) as K x K nested lists with zeros on the diagonal,
    so `finish + lat[a][b] + bytes * inv_bw[a][b]` is the arrival time on b of a
    tensor produced on a (and just `finish` when a == b)."""
    inv = 1.0 / np.asarray(cluster.bandwidth, float)
    np.fill_diagonal(inv, 0.0)
    lat = np.array(cluster.latency_us, float)
    np.fill_diagonal(lat, 0.0)
    return lat.tolist(), inv.tolist()


class GroupDevices:
    """Which devices each node may still go to, as placers fix groups one by one."""

    def __init__(self, graph, cluster, allowed=None):
        allowed = allowed_devices(graph, cluster) if allowed is None else allowed
        self.options = [np.flatnonzero(row).tolist() for row in allowed]
        self.group = graph.group.tolist()
        self.fixed = [-1] * graph.num_groups

    def choices(self, node) -> list:
        """Devices node may take now: its group's device once fixed, else the allowed ones."""
        g = self.group[node]
        return [self.fixed[g]] if self.fixed[g] >= 0 else self.options[g]

    def fix(self, node, device) -> bool:
        """Record node's device; True when this fixed its group for the first time."""
        g = self.group[node]
        first = self.fixed[g] < 0
        self.fixed[g] = device
        return first


def data_ready(v, ptr, src, eid, ebytes, finish, device, lat, inv_bw, k) -> list:
    """Time at which all inputs of v are available on each of the k devices, given
    the finish time and device of every predecessor (CSR predecessor lists)."""
    ready = [0.0] * k
    for p in range(ptr[v], ptr[v + 1]):
        u = src[p]
        f, du, b = finish[u], device[u], ebytes[eid[p]]
        row_lat, row_inv = lat[du], inv_bw[du]
        for d in range(k):
            t = f + row_lat[d] + b * row_inv[d]
            if t > ready[d]:
                ready[d] = t
    return ready

"""m-ETF (pardnn.placers.etf) and HEFT (pardnn.placers.heft) against references
written from their definitions (the modules' docstrings) as plain loops over every
ready node and device, with no heaps, gap lists or kernels: on random small graphs
with colocation groups, ties (costs are small whole numbers) and, for m-ETF, memory
that binds. Times are dyadic numbers (helpers.random_graphs.exact_cluster), so both
sides agree to the bit whatever order they add in."""

import functools

import numpy as np
import pytest

from helpers.random_graphs import exact_cluster, small_dag

from pardnn.graph.constraints import allowed_devices
from pardnn.graph.node_memory import resident_bytes, transient_bytes
from pardnn.placers import etf, heft

CASES = 60


def links(cluster):
    """(latency, 1 / bandwidth) between devices, 0 from a device to itself."""
    k = cluster.num_devices
    lat = [[0.0 if a == b else float(cluster.latency_us[a, b]) for b in range(k)] for a in range(k)]
    inv = [[0.0 if a == b else 1.0 / float(cluster.bandwidth[a, b]) for b in range(k)] for a in range(k)]
    return lat, inv


def in_edges(graph):
    return {v: [(int(graph.edge_src[e]), int(graph.edge_bytes[e]), bool(graph.edge_slot[e] >= 0))
                for e in range(graph.num_edges) if graph.edge_dst[e] == v] for v in range(graph.num_nodes)}


def static_levels(graph, edge_cost):
    """The costliest path from each node to a sink, its own cost included."""
    out = {v: [(int(graph.edge_dst[e]), edge_cost(e)) for e in range(graph.num_edges) if graph.edge_src[e] == v]
           for v in range(graph.num_nodes)}

    @functools.cache
    def level(v):
        return float(graph.comp_us[v]) + max((c + level(w) for w, c in out[v]), default=0.0)
    return [level(v) for v in range(graph.num_nodes)]


def reference_etf(graph, cluster):
    """Device per node: repeatedly start, among the ready nodes and the devices each may
    use, the one that starts first (ties: larger static level, smaller node id, smaller
    device), if its device has room for its output (and, for its group's first member,
    the group's resident state); when none has room, the one that overflows least."""
    n, k, lat, inv = graph.num_nodes, cluster.num_devices, *links(cluster)
    preds, level = in_edges(graph), static_levels(graph, lambda e: 0.0)
    group, cap, allowed = graph.group.tolist(), cluster.capacity.tolist(), allowed_devices(graph, cluster)
    resident = {}
    for v, r in enumerate(resident_bytes(graph).tolist()):
        resident[group[v]] = resident.get(group[v], 0) + r
    data_out = [sum(1 for u in range(graph.num_edges) if graph.edge_src[u] == v and graph.edge_slot[u] >= 0)
                for v in range(n)]
    held = [int(b) if data_out[v] else 0 for v, b in enumerate(transient_bytes(graph).tolist())]
    device, finish, free_at, used, fixed = [-1] * n, [0.0] * n, [0.0] * k, [0] * k, {}
    unconsumed = list(data_out)
    for _ in range(n):
        fitting, over = [], []
        for v in range(n):
            if device[v] >= 0 or any(device[u] < 0 for u, _, _ in preds[v]):
                continue
            for d in range(k):
                if fixed.get(group[v], d) != d or (group[v] not in fixed and not allowed[group[v], d]):
                    continue
                t = max([free_at[d]] + [finish[u] + lat[device[u]][d] + b * inv[device[u]][d]
                                        for u, b, _ in preds[v]])
                need = held[v] + (0 if group[v] in fixed else resident[group[v]])
                if group[v] in fixed or used[d] + need <= cap[d]:
                    fitting.append((t, -level[v], v, d))
                else:
                    over.append((used[d] + need - cap[d], -level[v], v, d, t))
        t, _, v, d = min(fitting) if fitting else (lambda c: (c[4], 0, c[2], c[3]))(min(over))
        device[v], finish[v], free_at[d] = d, t + float(graph.comp_us[v]), t + float(graph.comp_us[v])
        if group[v] not in fixed:
            fixed[group[v]] = d
            used[d] += resident[group[v]]
        used[d] += held[v]
        for u, _, data in preds[v]:
            if data:
                unconsumed[u] -= 1
                if unconsumed[u] == 0:
                    used[device[u]] -= held[u]
    return device


def reference_heft(graph, order, cost, lat, inv, allowed):
    """(device, start, finish): each node in `order` on the device where it finishes
    first (ties: the lower device), at the earliest slot there after its inputs
    arrive (`earliest_slot`); a colocation group follows its first member."""
    n, k = cost.shape
    preds = in_edges(graph)
    group = graph.group.tolist()
    device, start, finish, busy, fixed = [-1] * n, [0.0] * n, [0.0] * n, [[] for _ in range(k)], {}
    for v in order:
        best = None
        for d in range(k):
            if fixed.get(group[v], d) != d or (group[v] not in fixed and not allowed[group[v], d]):
                continue
            ready = max([0.0] + [finish[u] + lat[device[u]][d] + b * inv[device[u]][d] for u, b, _ in preds[v]])
            c = float(cost[v, d])
            s = earliest_slot(busy[d], ready, c)
            if best is None or s + c < best[0]:
                best = (s + c, s, d)
        f, s, d = best
        device[v], start[v], finish[v] = d, s, f
        busy[d].append((s, f))
        fixed.setdefault(group[v], d)
    return device, start, finish


def earliest_slot(busy, ready, length):
    """The earliest start >= ready of `length` on a device busy over the intervals
    `busy`: inside an idle gap (a stretch of positive length between two ops, or before
    the first; an op of no time is a point that splits a gap), or after the last op."""
    gaps, end = [], 0.0
    for a, b in sorted(busy):
        if a > end:
            gaps.append((end, a))
        end = max(end, b)
    return min([max(ready, a) for a, b in gaps if max(ready, a) + length <= b] + [max(ready, end)])


def etf_case(seed):
    graph, rng = small_dag(seed, groups=seed % 2 == 1)
    k = int(rng.integers(2, 4))
    total = int(resident_bytes(graph).sum() + transient_bytes(graph).sum())
    memory = 2**40 if seed % 3 == 0 else int(rng.integers(total // (3 * k), total // (2 * k) + 9))
    return graph, exact_cluster(k, memory)


@pytest.mark.parametrize("seed", range(CASES))
def test_m_etf_matches_the_reference(seed):
    graph, cluster = etf_case(seed)
    assert etf.place(graph, cluster).tolist() == reference_etf(graph, cluster)


@pytest.mark.parametrize("seed", range(CASES))
def test_heft_matches_the_reference(seed):
    graph, rng = small_dag(seed, groups=seed % 2 == 1)
    k = int(rng.integers(2, 4))
    cluster = exact_cluster(k)
    rank = static_levels(graph, lambda e: 2.0 + float(graph.edge_bytes[e]) / 4.0)
    order = sorted(range(graph.num_nodes), key=lambda v: (-rank[v], v))
    assert heft.place(graph, cluster).tolist() == reference_heft(
        graph, order, np.repeat(graph.comp_us[:, None], k, 1), *links(cluster), allowed_devices(graph, cluster))[0]
    cost = rng.choice([0.0, 1.0, 2.0, 3.0, 8.0], (graph.num_nodes, k))     # devices of unequal speed
    lat, inv = links(cluster)
    got = heft.schedule(graph, order, cost, lat, inv, allowed_devices(graph, cluster))
    want = reference_heft(graph, order, cost, lat, inv, allowed_devices(graph, cluster))
    assert [x.tolist() for x in got] == [list(x) for x in want]


def test_the_m_etf_cases_reach_the_memory_rules():
    """Memory changes the answer in enough cases (a node waits for room, or a group
    goes elsewhere), and in some no ready node fits anywhere (the least overflow wins)."""
    changed = 0
    for seed in range(CASES):
        graph, cluster = etf_case(seed)
        free = exact_cluster(cluster.num_devices)
        changed += reference_etf(graph, cluster) != reference_etf(graph, free)
    assert changed >= 15, changed            # 24 of the 40 with a memory limit

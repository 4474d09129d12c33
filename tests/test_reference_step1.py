"""Step 1's emulated critical path (pardnn.placers.step1_phases.switching._critical_path)
against a reference written from its definition with plain lists, on random small
graphs whose costs tie often: from the node that finishes last (the lowest id among
those), each step goes back to what set the node's start: its last input to arrive
(ties: the lowest producer id), a transfer when that input crossed devices; or else
the op whose end freed its device, a queue wait. The refinement moves nodes on this
path, so a tie broken the other way changes placements."""

import numpy as np
import pytest

from helpers.random_graphs import exact_cluster, small_dag

from pardnn.emulator.scheduler import simulate
from pardnn.graph.constraints import allowed_devices
from pardnn.placers.step1_phases.switching import _Timing

CASES = 240


def reference_path(graph, device, schedule):
    """([(u, v) transfers], [(u, v, v's ready time) queue waits]) from the path's end."""
    n = graph.num_nodes
    start, finish, comp = schedule.start.tolist(), schedule.finish.tolist(), graph.comp_us.tolist()
    src, dst = graph.edge_src.tolist(), graph.edge_dst.tolist()
    arrival = [finish[src[e]] if schedule.edge_transfer[e] < 0
               else float(schedule.transfer_arrival[schedule.edge_transfer[e]]) for e in range(graph.num_edges)]
    transfers, waits = [], []
    v = min(w for w in range(n) if finish[w] == max(finish)) if n else None
    while v is not None:
        inputs = [(arrival[e], src[e]) for e in range(graph.num_edges) if dst[e] == v]
        ready = max((a for a, _ in inputs), default=0.0)
        if inputs and start[v] == ready:
            u = min(s for a, s in inputs if a == ready)
            if device[u] != device[v]:
                transfers.append((u, v))
            v = u
            continue
        before = [w for w in range(n) if device[w] == device[v] and comp[w] > 0 and start[w] < start[v]]
        u = max(before, key=lambda w: start[w]) if before else None
        if u is not None and finish[u] == start[v]:
            waits.append((u, v, ready))
            v = u
        else:
            v = None
    return transfers, waits


def case(seed):
    graph, rng = small_dag(seed)
    k = int(rng.integers(2, 4))
    cluster = exact_cluster(k)
    device = rng.integers(0, k, graph.num_nodes)
    return graph, cluster, device, simulate(graph, cluster, device)


@pytest.mark.parametrize("seed", range(CASES))
def test_the_critical_path_matches_the_reference(seed):
    graph, cluster, device, schedule = case(seed)
    tu, tv, wu, wv, ready = _Timing(graph, cluster, device, schedule, allowed_devices(graph, cluster)).critical_path()
    transfers, waits = reference_path(graph, device, schedule)
    assert list(zip(tu.tolist(), tv.tolist())) == transfers
    assert list(zip(wu.tolist(), wv.tolist(), ready.tolist())) == waits


def test_the_reference_cases_reach_ties_transfers_and_waits():
    """Enough cases have a path with a transfer, with a queue wait, and with a node whose
    last inputs arrive together from different producers (the tie the rule breaks)."""
    transfers = waits = ties = 0
    for seed in range(CASES):
        graph, cluster, device, schedule = case(seed)
        t, w = reference_path(graph, device, schedule)
        transfers, waits = transfers + bool(t), waits + bool(w)
        arrival = schedule.finish[graph.edge_src].copy()
        cross = schedule.edge_transfer >= 0
        arrival[cross] = schedule.transfer_arrival[schedule.edge_transfer[cross]]
        for v in range(graph.num_nodes):
            into = arrival[graph.edge_dst == v]
            producers = graph.edge_src[graph.edge_dst == v][into == into.max()] if len(into) else []
            if len(set(np.asarray(producers).tolist())) > 1 and schedule.start[v] == into.max():
                ties += 1
                break
    assert transfers >= 120 and waits >= 90 and ties >= 12, (transfers, waits, ties)   # 194, 146, 19

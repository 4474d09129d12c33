"""The critical path of an emulated step: the chain of ops and transfers that set
its length, for a trace viewer to mark (pardnn.io.trace_events).

Walking back from the op that finishes last, each op started either when its last
input arrived (then the chain goes on through that input: the producer, and the
transfer when the input came from another device) or, when its inputs were there
before, when its device finished the op before it (then the chain goes on through
that op). The chain ends at an op that started at its ready time with no inputs.
A transfer delayed by its link's queue is on the chain as itself; the chain goes on
to its producer, not to the transfers ahead of it on the link.

Cost: vectorised passes over nodes and edges, then a walk of the chain's length.
"""

from __future__ import annotations

import numpy as np


def critical_path(graph, device, schedule):
    """(nodes, transfers) on the critical path of `schedule`, each in time order;
    transfers are indices into the schedule's transfer arrays."""
    nodes, transfers, _ = critical_chain(graph, device, schedule)
    return nodes, transfers


def critical_chain(graph, device, schedule):
    """`critical_path`'s (nodes, transfers), and per node of the chain whether the
    chain reached it through data: the op after it on the chain waited for its output
    (True for the last op), not for its device to finish running it."""
    n = graph.num_nodes
    if n == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, bool)
    device = np.asarray(device, np.int64)
    start, finish = schedule.start, schedule.finish
    ready, last_edge = _last_inputs(graph, schedule)
    before = _previous_on_device(device, start, finish)
    tolerance = 1e-9 * max(1.0, schedule.makespan)
    input_bound = start <= ready + tolerance
    edge_src, edge_transfer = graph.edge_src.tolist(), schedule.edge_transfer.tolist()
    last_edge, before, input_bound = last_edge.tolist(), before.tolist(), input_bound.tolist()
    nodes, transfers, by_data = [], [], [True]
    v = int(np.argmax(finish))
    for _ in range(n):                      # the chain visits each op at most once
        nodes.append(v)
        if input_bound[v]:
            e = last_edge[v]
            if e < 0:
                break
            if edge_transfer[e] >= 0:
                transfers.append(edge_transfer[e])
            v = edge_src[e]
            by_data.append(True)
        else:
            v = before[v]
            if v < 0:
                break
            by_data.append(False)
    return (np.asarray(nodes[::-1], np.int64), np.asarray(transfers[::-1], np.int64),
            np.asarray(by_data[:len(nodes)][::-1], bool))


def _last_inputs(graph, schedule):
    """Per node: when its last input arrived (0 with none) and over which edge (-1)."""
    n = graph.num_nodes
    eid = graph.pred_eid.astype(np.int64, copy=False)
    arrival = schedule.finish[graph.edge_src[eid]]
    moved = np.flatnonzero(schedule.edge_transfer[eid] >= 0)
    arrival[moved] = schedule.transfer_arrival[schedule.edge_transfer[eid[moved]]]
    owner = np.repeat(np.arange(n), np.diff(graph.pred_ptr))
    order = np.lexsort((arrival, owner))            # the latest input of each node last
    last = np.ones(len(order), bool)
    last[:-1] = owner[order][1:] != owner[order][:-1]
    ready = np.zeros(n)
    last_edge = np.full(n, -1, np.int64)
    ready[owner[order][last]] = arrival[order][last]
    last_edge[owner[order][last]] = eid[order][last]
    return ready, last_edge


def _previous_on_device(device, start, finish):
    """Per node: the op its device ran just before it, or -1."""
    order = np.lexsort((np.arange(len(device)), finish, start, device))
    before = np.full(len(device), -1, np.int64)
    same = device[order][1:] == device[order][:-1]
    before[order[1:][same]] = order[:-1][same]
    return before

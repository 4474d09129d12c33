"""The emulator's event loop (pardnn.emulator.event_loop) against a reference written
from the model that pardnn.emulator.scheduler states, not from the loop: every node
and transfer is an event in a plain priority queue of Python tuples, and each device's
ready queue is a list. Random small graphs whose times are exact (dyadic) doubles, so
both agree to the bit whatever order they add in; costs tie often, so the tie rules
(finishes before readiness at one instant, then node ids; FIFO by readiness) decide."""

import heapq

import numpy as np
import pytest

from helpers.random_graphs import exact_cluster, small_dag

from pardnn.emulator.scheduler import simulate
from pardnn.graph import CostGraph


def reference_schedule(graph, cluster, device, priority=None):
    """(start, finish, {(producer, slot, destination device): (send, arrival)}); with
    `priority`, a device that falls free runs its queued node of the lowest
    (rank, node) instead of the first queued."""
    n, k = graph.num_nodes, cluster.num_devices
    device = [int(d) for d in device]
    src, dst = graph.edge_src.tolist(), graph.edge_dst.tolist()
    slot, nbytes = graph.edge_slot.tolist(), graph.edge_bytes.tolist()
    out_edges = {u: [] for u in range(n)}
    for e in range(graph.num_edges):
        out_edges[src[e]].append(e)
    first_edge = {}                               # a tensor's bytes are its first edge's
    for e in range(graph.num_edges):
        key = (src[e], slot[e], device[dst[e]])
        if device[src[e]] != device[dst[e]]:
            first_edge[key] = min(first_edge.get(key, e), e)
    inputs_left = [0] * n
    for e in range(graph.num_edges):
        inputs_left[dst[e]] += 1
    ready_time, start, finish = [0.0] * n, [None] * n, [None] * n
    sent, link_free = {}, {}
    queue, busy = [[] for _ in range(k)], [False] * k
    events = [(0.0, 1, v) for v in range(n) if inputs_left[v] == 0]     # (time, 0 finish / 1 ready, node)
    heapq.heapify(events)

    def run(v, t):
        start[v], finish[v] = t, t + float(graph.comp_us[v])
        busy[device[v]] = True
        heapq.heappush(events, (finish[v], 0, v))

    while events:
        t, what, v = heapq.heappop(events)
        if what == 1:                             # v is ready on its device
            if busy[device[v]]:
                queue[device[v]].append(v)
            else:
                run(v, t)
            continue
        for e in sorted(out_edges[v]):            # v finished: its outputs leave, in edge order
            w, arrive = dst[e], t
            if device[w] != device[v]:
                key = (v, slot[e], device[w])
                if key not in sent:               # one transfer per tensor and device, sent now
                    a, b = device[v], device[w]
                    go = max(t, link_free.get((a, b), 0.0))
                    occupy = nbytes[first_edge[key]] / float(cluster.bandwidth[a, b])
                    link_free[(a, b)] = go + occupy
                    sent[key] = (go, go + occupy + float(cluster.latency_us[a, b]))
                arrive = sent[key][1]
            ready_time[w] = max(ready_time[w], arrive)
            inputs_left[w] -= 1
            if inputs_left[w] == 0:
                heapq.heappush(events, (ready_time[w], 1, w))
        busy[device[v]] = False
        if queue[device[v]]:
            waiting = queue[device[v]]
            first = 0 if priority is None else min(range(len(waiting)), key=lambda i: (priority[waiting[i]],
                                                                                       waiting[i]))
            run(waiting.pop(first), t)
    return np.array(start), np.array(finish), sent


@pytest.mark.parametrize("seed", range(60))
def test_the_event_loop_matches_the_reference(seed):
    graph, rng = small_dag(seed)
    k = int(rng.integers(1, 4))
    cluster = exact_cluster(k, latency=[2.0, 0.0][seed % 2])    # no latency: tensors land at once
    device = rng.integers(0, k, graph.num_nodes)
    s = simulate(graph, cluster, device)
    start, finish, sent = reference_schedule(graph, cluster, device)
    assert s.start.tolist() == start.tolist() and s.finish.tolist() == finish.tolist()
    got = {}
    for x, e in enumerate(s.transfer_edge.tolist()):
        key = (int(graph.edge_src[e]), int(graph.edge_slot[e]), int(s.transfer_dst[x]))
        got[key] = (float(s.transfer_send[x]), float(s.transfer_arrival[x]))
    assert got == sent


@pytest.mark.parametrize("seed", range(40))
def test_a_ranked_event_loop_matches_the_reference(seed):
    """List scheduling: the same model with a rank per node deciding each queue."""
    graph, rng = small_dag(seed)
    k = int(rng.integers(1, 4))
    cluster = exact_cluster(k, latency=[2.0, 0.0][seed % 2])
    device = rng.integers(0, k, graph.num_nodes)
    priority = rng.integers(0, 5, graph.num_nodes)          # ties between ranks go by node id
    s = simulate(graph, cluster, device, priority)
    start, finish, _ = reference_schedule(graph, cluster, device, priority.tolist())
    assert s.start.tolist() == start.tolist() and s.finish.tolist() == finish.tolist()


def test_ranks_change_which_queued_node_runs_first():
    """Two ready nodes queued behind a third: FIFO runs them by readiness, ranks reverse them."""
    graph = CostGraph.build(["a", "b", "c"], comp_us=[4.0, 1.0, 1.0])
    cluster = exact_cluster(1)
    fifo = simulate(graph, cluster, [0, 0, 0])
    ranked = simulate(graph, cluster, [0, 0, 0], priority=[0, 2, 1])
    assert fifo.start.tolist() == [0.0, 4.0, 5.0]
    assert ranked.start.tolist() == [0.0, 5.0, 4.0]


def test_the_reference_cases_tie_and_queue():
    """The random cases reach what the tie rules decide: ops that start the instant
    another ends, ready ops that wait in a queue, and transfers that wait for a link."""
    ties = queued = link_waits = 0
    for seed in range(60):
        graph, rng = small_dag(seed)
        k = int(rng.integers(1, 4))
        device = rng.integers(0, k, graph.num_nodes)
        start, finish, sent = reference_schedule(graph, exact_cluster(k), device)
        ties += len(set(start.tolist())) < graph.num_nodes
        ready = np.zeros(graph.num_nodes)
        for e in range(graph.num_edges):
            u, w = int(graph.edge_src[e]), int(graph.edge_dst[e])
            key = (u, int(graph.edge_slot[e]), int(device[w]))
            ready[w] = max(ready[w], sent[key][1] if device[u] != device[w] else finish[u])
        queued += bool(np.any(start > ready))
        link_waits += any(go > finish[p] for (p, _, _), (go, _) in sent.items())
    assert ties >= 40 and queued >= 20 and link_waits >= 5, (ties, queued, link_waits)


def test_a_tensor_reaches_every_consumer_on_a_device_by_its_one_transfer():
    """u's output 0 (no bytes) goes to a and b on device 1, its output 1 (8 bytes, 2 us
    on the link) to c, issued between them: b gets output 0 when a does, at once, not
    by a second transfer queued behind output 1's. (No latency, so the tensor lands at
    the instant it is sent.)"""
    graph = CostGraph.build(names=["u", "a", "c", "b"], comp_us=[0, 1, 1, 1],
                            edge_src=["u", "u", "u"], edge_dst=["a", "c", "b"], edge_slot=[0, 1, 0],
                            edge_bytes=[0, 8, 0])
    cluster = exact_cluster(2, latency=0.0)
    s = simulate(graph, cluster, [0, 1, 1, 1])
    ix = graph.index()
    assert [s.start[ix[v]] for v in "uacb"] == [0.0, 0.0, 2.0, 1.0]
    assert len(s.transfer_edge) == 2 and sorted(s.transfer_arrival.tolist()) == [0.0, 2.0]
    start, _, _ = reference_schedule(graph, cluster, [0, 1, 1, 1])
    assert start.tolist() == s.start.tolist()

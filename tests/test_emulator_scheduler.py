"""The executor emulation on small graphs whose schedules are worked out by hand,
plus schedule invariants on random graphs."""

import numpy as np
import pytest
from hypothesis import strategies as st

from pardnn.pipeline.report import evaluate
from pardnn.emulator.trial import busiest_device_us, longest_path_us
from pardnn.emulator.scheduler import simulate
from pardnn.graph import CostGraph
from pardnn.graph.edge_costs import comm_bytes

from helpers.random_graphs import cluster, placed_graphs


def graph(nodes, edges, nbytes=100):
    """nodes: {name: comp_us} in topological order; edges: (src, dst[, slot])."""
    edges = [e if len(e) == 3 else (*e, 0) for e in edges]
    return CostGraph.build(names=list(nodes), comp_us=list(nodes.values()),
                           out_bytes=[nbytes] * len(nodes),
                           edge_src=[e[0] for e in edges], edge_dst=[e[1] for e in edges],
                           edge_slot=[e[2] for e in edges], edge_bytes=[nbytes] * len(edges))


def times(g, s):
    return {name: (s.start[i], s.finish[i]) for i, name in enumerate(g.names)}


def test_chain_on_one_device_runs_back_to_back():
    g = graph({"a": 1, "b": 2, "c": 3}, [("a", "b"), ("b", "c")])
    s = simulate(g, cluster(2, latency=10, bandwidth=100), [0, 0, 0])
    assert times(g, s) == {"a": (0, 1), "b": (1, 3), "c": (3, 6)}
    assert s.makespan == 6 and len(s.transfer_edge) == 0
    assert s.busy_us.tolist() == [6, 0]


def test_chain_across_devices_pays_latency_plus_bytes_over_bandwidth():
    # each hop: 10 us latency + 200 B / 100 B/us = 12 us
    g = graph({"a": 1, "b": 2, "c": 3}, [("a", "b"), ("b", "c")], nbytes=200)
    s = simulate(g, cluster(2, latency=10, bandwidth=100), [0, 1, 0])
    assert times(g, s) == {"a": (0, 1), "b": (13, 15), "c": (27, 30)}
    assert s.transfer_send.tolist() == [1, 15] and s.transfer_arrival.tolist() == [13, 27]


def fork_join(y_cost):
    # s -> x -> j and s -> y -> j; every tensor 100 B; link 1 us + 100 B / 100 B/us = 2 us
    return graph({"s": 1, "x": 10, "y": y_cost, "j": 1},
                 [("s", "x"), ("s", "y"), ("x", "j"), ("y", "j")])


def test_fork_join_hides_communication_behind_parallel_work():
    g = fork_join(y_cost=4)
    s = simulate(g, cluster(2, latency=1, bandwidth=100), [0, 0, 1, 0])
    # y: arrives 3, runs 3..7, result lands at 9, before x finishes at 11
    assert times(g, s) == {"s": (0, 1), "x": (1, 11), "y": (3, 7), "j": (11, 12)}
    assert s.makespan == 12                      # = compute-only critical path s, x, j


def test_fork_join_exposes_communication_when_parallel_work_is_short():
    g = fork_join(y_cost=9)
    s = simulate(g, cluster(2, latency=1, bandwidth=100), [0, 0, 1, 0])
    # y runs 3..12 and lands at 14, after x finished at 11: j waits
    assert times(g, s) == {"s": (0, 1), "x": (1, 11), "y": (3, 12), "j": (14, 15)}
    assert s.makespan == 15


def test_one_tensor_to_several_consumers_on_one_device_is_sent_once():
    # p's slot 0 feeds c1, c2, c3 on device 1; slot 1 feeds d on device 1.
    g = graph({"p": 1, "c1": 1, "c2": 1, "c3": 1, "d": 1},
              [("p", "c1"), ("p", "c2"), ("p", "c3"), ("p", "d", 1)], nbytes=500)
    device = [0, 1, 1, 1, 1]
    s = simulate(g, cluster(2, latency=1, bandwidth=100), device)
    # slot 0: link 1..6, lands 7; slot 1 queues behind it on the link: 6..11, lands 12
    assert len(s.transfer_edge) == 2
    assert s.transfer_send.tolist() == [1, 6] and s.transfer_arrival.tolist() == [7, 12]
    assert times(g, s) == {"p": (0, 1), "c1": (7, 8), "c2": (8, 9), "c3": (9, 10), "d": (12, 13)}
    assert s.transfer_bytes.sum() == comm_bytes(g, device) == 1000


def test_transfers_on_different_links_do_not_wait_for_each_other():
    g = graph({"p": 1, "q": 1, "c": 1, "d": 1}, [("p", "c"), ("q", "d")], nbytes=500)
    s = simulate(g, cluster(3, latency=1, bandwidth=100), [0, 0, 1, 2])
    # p 0..1 then q 1..2 on device 0; both links are free when they send
    assert s.transfer_arrival.tolist() == [7, 8]
    assert times(g, s)["d"] == (8, 9)


def test_ready_queue_is_fifo_in_order_of_readiness_not_node_id():
    # r occupies device 1 until 3; y becomes ready there at 1, x at 2: y runs first.
    g = graph({"p0": 1, "p1": 1, "r": 3, "x": 1, "y": 1}, [("p0", "y"), ("p1", "x")])
    assert g.names.index("x") < g.names.index("y")
    s = simulate(g, cluster(2), [0, 0, 1, 1, 1])
    assert times(g, s) == {"p0": (0, 1), "p1": (1, 2), "r": (0, 3), "y": (3, 4), "x": (4, 5)}


def test_control_edges_delay_across_devices_but_carry_no_bytes():
    g = CostGraph.build(names=["a", "b"], comp_us=[1, 1], edge_src=["a"], edge_dst=["b"],
                        edge_bytes=[0], edge_slot=[-1])
    s = simulate(g, cluster(2, latency=5, bandwidth=100), [0, 1])
    assert times(g, s)["b"] == (6, 7) and s.transfer_bytes.tolist() == [0]


def test_evaluate_reports_the_contract_fields():
    g = fork_join(y_cost=9)
    c = cluster(2, latency=1, bandwidth=100).with_options(memory=1000)
    r = evaluate(g, c, [0, 0, 1, 0])
    assert r.makespan_us == 15 and r.single_device_us == 21
    # j starts at 12 at best: a transfer from x or y lands at 13 or 12, or both run on j's
    # device one after the other (1 + 19): the step is at least 13 > critical path 12
    assert r.lower_bound_us == 13
    assert r.busy_us == [12, 9] and r.comm_bytes == 200
    assert r.feasible is True and len(r.peak_memory_bytes) == 2
    one = evaluate(g, c, [0, 0, 0, 0])
    assert one.makespan_us == one.single_device_us == 21


# ------------------------------------------------------------ random graphs
def ready_times(g, s, device):
    """When each node's last input is on its device, from the schedule."""
    ready = np.zeros(g.num_nodes)
    for e in range(g.num_edges):
        u, v, x = g.edge_src[e], g.edge_dst[e], s.edge_transfer[e]
        ready[v] = max(ready[v], s.finish[u] if x < 0 else s.transfer_arrival[x])
    return ready


def test_schedule_invariants(reached):
    """Reached when the case has a transfer (the send and arrival rules) and a device
    that runs two ops that take time (one at a time, FIFO, work-conserving)."""
    def check(case):
        g, c, device = case
        s = simulate(g, c, device)
        ready = ready_times(g, s, device)
        assert np.allclose(s.finish - s.start, g.comp_us)
        assert np.all(s.start >= ready - 1e-9)
        for x, e in enumerate(s.transfer_edge):          # a send waits for its producer
            a, b = device[g.edge_src[e]], device[g.edge_dst[e]]
            assert s.transfer_send[x] >= s.finish[g.edge_src[e]]
            assert s.transfer_arrival[x] == pytest.approx(
                s.transfer_send[x] + c.latency_us[a, b] + g.edge_bytes[e] / c.bandwidth[a, b])
        for d in range(c.num_devices):
            on = np.flatnonzero(device == d)
            order = on[np.lexsort((s.finish[on], s.start[on]))]
            assert np.all(s.start[order[1:]] >= s.finish[order[:-1]] - 1e-9)    # one at a time
            for v in on:                                 # busy all the time v waited (work-conserving)
                lo, hi = ready[v], s.start[v]
                busy = np.clip(np.minimum(s.finish[on], hi) - np.maximum(s.start[on], lo), 0, None).sum()
                assert busy == pytest.approx(hi - lo)
                later = on[ready[on] > ready[v]]         # FIFO: nobody ready later starts earlier
                assert np.all(s.start[later] >= s.start[v])
        running = np.bincount(device[g.comp_us > 0], minlength=c.num_devices)
        return len(s.transfer_edge) > 0 and running.max() >= 2

    reached(placed_graphs(), check, 150)


# ------------------------------------------------------------ the lower bounds
def makespan_lower_bound(g, c, device):
    return max(busiest_device_us(g, c, device), longest_path_us(g, c, device))


def test_the_bound_of_a_chain_across_devices_is_its_emulated_step():
    # one path, no queueing: a 1 + 12 + b 2 + 12 + c 3 = 30 us, exactly the emulation
    g = graph({"a": 1, "b": 2, "c": 3}, [("a", "b"), ("b", "c")], nbytes=200)
    c = cluster(2, latency=10, bandwidth=100)
    assert makespan_lower_bound(g, c, [0, 1, 0]) == simulate(g, c, [0, 1, 0]).makespan == 30


def test_the_bound_of_independent_ops_on_one_device_is_their_sum():
    g = graph({"a": 4, "b": 5, "c": 6}, [])
    assert makespan_lower_bound(g, cluster(2), [1, 1, 1]) == 15
    assert makespan_lower_bound(g, cluster(2), [0, 1, 1]) == 11


def test_the_bound_never_exceeds_the_emulated_step(reached):
    """Reached when a transfer lengthens the longest path (the part of the bound that
    prices communication is at work)."""
    def check(case):
        seed, k = case
        rng = np.random.default_rng(seed)
        n = int(rng.integers(2, 40))
        edges = [(int(u), int(v)) for u, v in rng.integers(0, n, (2 * n, 2)) if u < v]
        g = CostGraph.build(names=[f"n{i}" for i in range(n)], comp_us=rng.uniform(0, 20, n).tolist(),
                            out_bytes=[100] * n, edge_src=[u for u, _ in edges], edge_dst=[v for _, v in edges],
                            edge_slot=[0] * len(edges), edge_bytes=rng.integers(0, 5000, len(edges)).tolist())
        c = cluster(k, latency=float(rng.uniform(0, 5)), bandwidth=float(rng.uniform(10, 1000)))
        device = rng.integers(0, k, n)
        assert makespan_lower_bound(g, c, device) <= simulate(g, c, device).makespan * (1 + 1e-12)
        return longest_path_us(g, c, device) > longest_path_us(g, cluster(1), np.zeros(n, int))

    reached(st.tuples(st.integers(0, 10_000), st.integers(2, 5)), check, 60)

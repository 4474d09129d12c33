"""The compiled event loop against an interpreted one written from the model in
pardnn.emulator.scheduler's docstring: the same start, finish, send and arrival
times, to the bit, on random training-like graphs with ties (zero-cost ops, equal
costs) and random placements, and on 60 small random graphs with control edges,
colocation groups and placements the memory repair made under a memory limit."""

import heapq
from collections import deque

import numpy as np
import pytest

from pardnn.emulator.scheduler import plan_transfers, simulate
from pardnn.hardware import parse_devices

from tools.synth_graph import synth_graph


def interpreted(graph, cluster, device):
    """Per-device FIFO queues, one op at a time, transfers serialised per link."""
    n, k = graph.num_nodes, cluster.num_devices
    edge_transfer, _, link, occupancy, latency = plan_transfers(graph, cluster, device)
    indeg, ready = np.diff(graph.pred_ptr).tolist(), [0.0] * n
    start, finish = [0.0] * n, [0.0] * n
    send, arrival, link_free = [0.0] * len(link), [-1.0] * len(link), [0.0] * (k * k)
    queues, idle = [deque() for _ in range(k)], [True] * k
    heap = [(0.0, n + v) for v in range(n) if indeg[v] == 0]

    def run(v, t):
        start[v], finish[v] = t, t + graph.comp_us[v]
        heapq.heappush(heap, (finish[v], v))

    while heap:
        t, key = heapq.heappop(heap)
        if key >= n:                                    # ready: run it or queue it
            v, d = key - n, device[key - n]
            if idle[d]:
                idle[d] = False
                run(v, t)
            else:
                queues[d].append(v)
            continue
        for e in range(graph.succ_ptr[key], graph.succ_ptr[key + 1]):
            v, x = graph.edge_dst[e], edge_transfer[e]
            a = t
            if x >= 0:
                if arrival[x] < 0.0:
                    send[x] = max(link_free[link[x]], t)
                    link_free[link[x]] = send[x] + occupancy[x]
                    arrival[x] = send[x] + occupancy[x] + latency[x]
                a = arrival[x]
            ready[v] = max(ready[v], a)
            indeg[v] -= 1
            if indeg[v] == 0:
                heapq.heappush(heap, (ready[v], n + v))
        d = device[key]
        if queues[d]:
            run(queues[d].popleft(), t)
        else:
            idle[d] = True
    return start, finish, send, arrival


@pytest.mark.parametrize("seed", range(6))
def test_compiled_loop_gives_the_interpreted_schedule_to_the_bit(seed):
    rng = np.random.default_rng(seed)
    g = synth_graph(600, seed=seed, shape="chain" if seed % 2 else "dag")
    if seed >= 2:
        g.comp_us[rng.random(g.num_nodes) < 0.3] = 0.0      # many ops finishing at one instant
        g.comp_us[rng.random(g.num_nodes) < 0.3] = 5.0
    cluster = parse_devices(["cpu:3", "dgx1-v100:8", "2xdgx-h100:2"][seed % 3])
    device = rng.integers(0, cluster.num_devices, g.num_nodes)
    s = simulate(g, cluster, device)
    start, finish, send, arrival = interpreted(g, cluster, device)
    assert s.start.tolist() == start and s.finish.tolist() == finish
    assert s.transfer_send.tolist() == send and s.transfer_arrival.tolist() == arrival
    assert len(send) > 0


def random_case(seed):
    """A small random DAG with control edges (slot -1), colocation groups, zero-cost
    ops and equal costs (ties), resident state, and a placement: per group at random,
    or, in every other case, what the memory repair makes of everything on device 0
    under a memory limit."""
    from pardnn.pipeline.report import evaluate
    from pardnn.base.errors import UserError
    from pardnn.graph import CostGraph
    from pardnn.pipeline.judge import judge

    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 30))
    pairs = sorted({(int(u), int(v)) for u, v in rng.integers(0, n, (3 * n, 2)) if u < v})
    out = rng.choice([0, 10, 40], n)
    g = CostGraph.build(names=[f"n{i}" for i in range(n)], comp_us=rng.choice([0.0, 1.0, 2.0, 2.5], n),
                        out_bytes=out, persist_bytes=rng.choice([0, 0, 30], n), group=rng.integers(0, n, n),
                        edge_src=[u for u, _ in pairs], edge_dst=[v for _, v in pairs],
                        edge_slot=rng.integers(-1, 2, len(pairs)), edge_bytes=[int(out[u]) for u, _ in pairs])
    cluster = parse_devices(f"cpu:{int(rng.integers(1, 4))}").with_options(latency=1.0, bandwidth=20.0)
    device = rng.integers(0, cluster.num_devices, g.num_groups)[g.group]
    if seed % 2:
        on_one = np.zeros(n, np.int32)
        peak = evaluate(g, cluster.with_options(memory=2**40), on_one).peak_memory_bytes[0]
        limited = cluster.with_options(memory=max(int(0.7 * peak), 1), reserve=0.0)
        try:
            device = judge(g, limited, on_one).device
        except UserError:
            pass
    return g, cluster, device


@pytest.mark.parametrize("seed", range(60))
def test_compiled_loop_matches_on_small_random_graphs(seed):
    g, cluster, device = random_case(seed)
    s = simulate(g, cluster, device)
    start, finish, send, arrival = interpreted(g, cluster, device)
    assert s.start.tolist() == start and s.finish.tolist() == finish
    assert s.transfer_send.tolist() == send and s.transfer_arrival.tolist() == arrival

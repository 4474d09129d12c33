"""Baseline placers on small hand-made graphs whose right answer is known. What every
registered placer keeps (an int device per node, groups whole, pins on their kind, the
same answer twice, memory or a refusal) is checked over the whole registry in
tests/test_placer_contract.py."""

import numpy as np
import pytest

from pardnn.placers import etf, heft, linear, metis_cut, single, topo
from pardnn.hardware import parse_devices
from pardnn.graph.constraints import violations
from pardnn.graph import CostGraph

from helpers.placer_graphs import mixed_cluster, training_like


def test_single_puts_everything_on_device_0_but_pinned_groups():
    g = training_like()
    device = single.place(g, mixed_cluster())
    on_cpu = {g.index()[x] for x in ("log", "log_sink")}
    assert all(device[i] == (2 if i in on_cpu else 0) for i in range(g.num_nodes))


def chain(n, mem=100, comp=1.0):
    return CostGraph.build(names=[f"n{i}" for i in range(n)], comp_us=[comp] * n,
                           out_bytes=[mem] * n, edge_src=range(n - 1), edge_dst=range(1, n),
                           edge_bytes=[mem] * (n - 1))


def test_topo_fills_devices_in_order_up_to_the_memory_share():
    # share = 800 / 2 + 100 (Baechi: total / K + largest op) = 500 bytes per device
    assert topo.place(chain(8), parse_devices("gpu:2")).tolist() == [0] * 5 + [1] * 3


def test_topo_respects_capacity_and_overflows_to_the_roomiest_device():
    cluster = parse_devices("gpu:3").with_options(memory=400, reserve=0.25)    # 300 usable
    assert topo.place(chain(8), cluster).tolist() == [0, 0, 0, 1, 1, 1, 2, 2]
    small = parse_devices("gpu:2").with_options(memory=200, reserve=0.0)      # 6 x 100 bytes > 2 x 200
    device = topo.place(chain(6), small)
    assert device[:4].tolist() == [0, 0, 1, 1] and np.bincount(device).tolist() == [3, 3]


def fork_join(edge_bytes=0, out=0):
    """a -> (b, c) -> d with b and c 10 us each."""
    return CostGraph.build(names=list("abcd"), comp_us=[1, 10, 10, 1], out_bytes=[0, out, out, 0],
                           edge_src=[0, 0, 1, 2], edge_dst=[1, 2, 3, 3], edge_bytes=[edge_bytes] * 4)


def test_etf_runs_parallel_branches_in_parallel_when_communication_is_cheap():
    cluster = parse_devices("gpu:2").with_options(latency=0.0, bandwidth=1e6)
    assert etf.place(fork_join(), cluster).tolist() == [0, 0, 1, 0]


def test_etf_keeps_branches_together_when_communication_is_dear():
    cluster = parse_devices("gpu:2").with_options(latency=100.0)
    assert etf.place(fork_join(), cluster).tolist() == [0, 0, 0, 0]


def test_etf_moves_a_node_when_its_output_does_not_fit():
    # b's 600-byte output stays until d runs; c's cannot join it in 1000 bytes, so c
    # pays 100 us to run on device 1, and d then starts earliest there.
    slow = parse_devices("gpu:2").with_options(latency=100.0, memory=1000, reserve=0.0)
    assert etf.place(fork_join(out=600), slow).tolist() == [0, 0, 1, 1]
    roomy = slow.with_options(memory=2000)
    assert etf.place(fork_join(out=600), roomy).tolist() == [0, 0, 0, 0]


def test_etf_still_places_a_graph_that_fits_nowhere():
    tiny = parse_devices("gpu:2").with_options(memory=100, reserve=0.0)
    device = etf.place(fork_join(out=600), tiny)
    assert device.shape == (4,) and violations(fork_join(), tiny, device) == []


# Topcuoglu, Hariri and Wu (2002), Fig. 2: 10 tasks on 3 heterogeneous processors.
TEXTBOOK_EDGES = {(1, 2): 18, (1, 3): 12, (1, 4): 9, (1, 5): 11, (1, 6): 14, (2, 8): 19, (2, 9): 16,
                  (3, 7): 23, (4, 8): 27, (4, 9): 23, (5, 9): 13, (6, 8): 15, (7, 10): 17,
                  (8, 10): 11, (9, 10): 13}
TEXTBOOK_COST = [[14, 16, 9], [13, 19, 18], [11, 13, 19], [13, 8, 17], [12, 13, 10],
                 [13, 16, 9], [7, 15, 11], [5, 11, 14], [18, 12, 20], [21, 7, 16]]


def test_heft_reproduces_the_textbook_schedule():
    from pardnn.graph.constraints import allowed_devices
    from pardnn.placers.common import link_tables
    from pardnn.graph.levels import bottom_levels
    g = CostGraph.build(names=[f"n{i}" for i in range(1, 11)],
                        edge_src=[a - 1 for a, _ in TEXTBOOK_EDGES], edge_dst=[b - 1 for _, b in TEXTBOOK_EDGES],
                        edge_bytes=list(TEXTBOOK_EDGES.values()))
    cost = np.array(TEXTBOOK_COST, float)
    cluster = parse_devices("gpu:3").with_options(latency=0.0, bandwidth=1.0)   # 1 byte/us: bytes = us
    rank = np.round(bottom_levels(g, cost.mean(axis=1), g.edge_bytes), 9)   # n3, n4 tie at 80
    assert rank.tolist() == pytest.approx([108, 77, 80, 80, 69, 63 + 1 / 3, 42 + 2 / 3, 35 + 2 / 3,
                                           44 + 1 / 3, 14 + 2 / 3])
    order = np.lexsort((np.arange(10), -rank))
    assert (order + 1).tolist() == [1, 3, 4, 2, 5, 6, 9, 7, 8, 10]
    lat, inv_bw = link_tables(cluster)
    device, start, finish = heft.schedule(g, order, cost, lat, inv_bw, allowed_devices(g, cluster))
    assert finish.max() == pytest.approx(80.0)
    assert (device + 1).tolist() == [3, 1, 3, 2, 3, 2, 3, 1, 2, 2]


def test_heft_inserts_a_node_into_an_idle_gap():
    # p (cheap on device 1) feeds q (cheap on device 0) after a 10 us transfer, leaving
    # device 0 idle during [0, 11); r, scheduled last, fits into that gap.
    from pardnn.graph.constraints import allowed_devices
    from pardnn.placers.common import link_tables
    g = CostGraph.build(names=["p", "q", "r"], edge_src=[0], edge_dst=[1], edge_bytes=[10])
    cluster = parse_devices("gpu:2").with_options(latency=0.0, bandwidth=1.0)
    cost = np.array([[100, 1], [1, 100], [5, 100]], float)
    lat, inv_bw = link_tables(cluster)
    device, start, finish = heft.schedule(g, [0, 1, 2], cost, lat, inv_bw, allowed_devices(g, cluster))
    assert device.tolist() == [1, 0, 0]
    assert start.tolist() == [0.0, 11.0, 0.0] and finish.tolist() == [1.0, 12.0, 5.0]


def test_heft_place_splits_a_fork_when_communication_is_free():
    cluster = parse_devices("gpu:2").with_options(latency=0.0, bandwidth=1e6)
    assert heft.place(fork_join(), cluster).tolist() == [0, 0, 1, 0]


def diamond():
    """s -> a (10) -> t and s -> b (5) -> t, communication free."""
    return CostGraph.build(names=list("sabt"), comp_us=[1, 10, 5, 1],
                           edge_src=[0, 0, 1, 2], edge_dst=[1, 2, 3, 3])


def test_linear_clustering_takes_the_critical_path_first():
    assert linear.linear_clusters(diamond(), diamond().comp_us, np.zeros(4)).tolist() == [0, 0, 1, 0]


def test_linear_glb_gives_the_side_cluster_the_idle_device():
    cluster = parse_devices("gpu:2").with_options(latency=0.0, bandwidth=1e6)
    timings = {}
    assert linear.place(diamond(), cluster, timings).tolist() == [0, 0, 1, 0]
    assert set(timings) == {"clustering", "mapping"}


def naive_linear_clusters(g, w, c):
    """Oracle: recompute every level from scratch after each path."""
    from pardnn.graph.levels import NEG_INF, bottom_levels, top_levels
    cost = np.asarray(w, float).copy()
    label = np.full(g.num_nodes, -1)
    found = 0
    while (label < 0).any():
        tl, bl = top_levels(g, cost, c), bottom_levels(g, cost, c)
        s = int(np.argmax(np.where(label < 0, tl + bl, NEG_INF)))
        path = [s]
        for nbrs, pick in ((g.predecessors, lambda u, e, tl=tl: tl[u] + cost[u] + c[e]),
                           (g.successors, lambda x, e, bl=bl: c[e] + bl[x])):
            v = s
            while True:
                options = [(pick(u, e), -u, u) for u, e in nbrs_with_edges(g, v, nbrs) if label[u] < 0 and u not in path]
                if not options:
                    break
                v = max(options)[2]
                path.append(v)
        label[path] = found
        cost[path] = NEG_INF
        found += 1
    return label


def nbrs_with_edges(g, v, nbrs):
    if nbrs == g.predecessors:
        return zip(g.predecessors(v).tolist(), g.pred_eid[g.pred_ptr[v]:g.pred_ptr[v + 1]].tolist())
    return zip(g.successors(v).tolist(), range(g.succ_ptr[v], g.succ_ptr[v + 1]))


@pytest.mark.parametrize("seed", range(6))
def test_incremental_linear_clustering_matches_full_recomputation(seed):
    rng = np.random.default_rng(seed)
    n = 40
    src, dst = np.nonzero(np.triu(rng.random((n, n)) < 0.08, 1))
    g = CostGraph.build(names=[f"v{i}" for i in range(n)], comp_us=rng.integers(0, 9, n),
                        edge_src=src, edge_dst=dst)
    c = rng.integers(0, 5, g.num_edges).astype(float)
    assert linear.linear_clusters(g, g.comp_us, c).tolist() == naive_linear_clusters(g, g.comp_us, c).tolist()


def two_communities():
    """Two 4-cliques of heavy tensors joined by one light edge."""
    src, dst, nbytes = [], [], []
    for base in (0, 4):
        for i in range(4):
            for j in range(i + 1, 4):
                src.append(base + i)
                dst.append(base + j)
                nbytes.append(10**6)
    src.append(3)
    dst.append(4)
    nbytes.append(1)
    return CostGraph.build(names=[f"v{i}" for i in range(8)], comp_us=[1] * 8,
                           edge_src=src, edge_dst=dst, edge_bytes=nbytes)


def test_metis_cuts_the_light_edge():
    device = metis_cut.place(two_communities(), parse_devices("gpu:2"))
    assert len(set(device[:4].tolist())) == 1 and len(set(device[4:].tolist())) == 1
    assert device[0] != device[4]


def test_metis_keeps_its_c_messages_off_stdout(capfd):
    # one node holds almost all the work: METIS leaves parts empty and complains in C
    g = CostGraph.build(names=[f"v{i}" for i in range(6)], comp_us=[1000, 1, 1, 1, 1, 1],
                        edge_src=[0, 0, 0, 0, 0], edge_dst=[1, 2, 3, 4, 5], edge_bytes=[10] * 5)
    device = metis_cut.place(g, parse_devices("cpu:16"))
    assert violations(g, parse_devices("cpu:16"), device) == []
    assert capfd.readouterr() == ("", "")

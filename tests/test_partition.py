"""ParDNN Step 1 (`--algorithm pardnn`) on small hand-made graphs with known answers."""

import json

import numpy as np
import pytest

from pardnn.cli import main
from pardnn.hardware import Cluster, Device, parse_devices
from pardnn.graph.constraints import allowed_devices, violations
from pardnn.emulator.scheduler import simulate
from pardnn.graph import CostGraph
from pardnn.graph.edge_costs import mean_edge_costs
from pardnn.placers.step1_phases.mapping import map_clusters
from pardnn.emulator.trial import emulate
from pardnn.placers.step1 import partition, place
from pardnn.placers.step1_phases.slicing import slice_graph
from pardnn.placers.step1_phases.switching import unblock_moves

from tools.synth_graph import synth_graph


def link(k, bandwidth=1000.0, latency=0.0):
    """k GPUs whose edges cost latency + bytes / bandwidth (bytes per us)."""
    return parse_devices(f"gpu:{k}").with_options(bandwidth=bandwidth, latency=latency)


def build(nodes, edges, **kw):
    """nodes: {name: comp_us}; edges: [(src, dst, bytes)]."""
    src, dst, nbytes = zip(*edges)
    return CostGraph.build(names=list(nodes), comp_us=list(nodes.values()),
                           edge_src=list(src), edge_dst=list(dst), edge_bytes=list(nbytes), **kw)


def devices_of(graph, device, names):
    index = graph.index()
    return {int(device[index[n]]) for n in names}


def test_two_independent_chains_go_to_different_devices():
    g = build({"a0": 10, "a1": 10, "a2": 10, "b0": 10, "b1": 10, "b2": 10},
              [("a0", "a1", 5000), ("a1", "a2", 5000), ("b0", "b1", 5000), ("b1", "b2", 5000)])
    device = place(g, link(2), {}, emulate=emulate)
    a, b = devices_of(g, device, ["a0", "a1", "a2"]), devices_of(g, device, ["b0", "b1", "b2"])
    assert len(a) == 1 and len(b) == 1 and a != b


def test_a_chain_with_heavy_edges_stays_on_one_device():
    nodes = {f"x{i}": 10.0 for i in range(8)} | {"y": 1.0}
    edges = [(f"x{i}", f"x{i + 1}", 10**7) for i in range(7)] + [("y", "x7", 10)]
    g = build(nodes, edges)
    timings = {}
    device = place(g, link(4), timings, emulate=emulate)
    assert len(devices_of(g, device, [f"x{i}" for i in range(8)])) == 1
    assert set(timings) == {"slicing", "mapping", "refine"}


def fork_join():
    """s -> {a, b, b2} -> t. The critical path runs through a (1000 us of work);
    b's two edges cost 505 us each, more than the 1005 us of other work in its span."""
    nodes = {"s": 1, "a": 1000, "b": 1, "b2": 5, "t": 1}
    edges = [("s", "a", 15000), ("a", "t", 15000), ("s", "b", 505000), ("b", "t", 505000),
             ("s", "b2", 505000), ("b2", "t", 505000)]
    return build(nodes, edges)


def test_fork_join_branch_that_cannot_hide_its_communication_is_merged():
    g, cluster = fork_join(), link(2)
    allowed = allowed_devices(g, cluster)
    cost = mean_edge_costs(g, cluster)
    slices = slice_graph(g, 2, cost, np.ones((g.num_groups, 2), bool))
    index = g.index()
    cid = slices.cluster
    assert cid[index["s"]] == cid[index["a"]] == cid[index["t"]] == 0     # the critical path
    assert cid[index["b2"]] == 1 and cid[index["b"]] == 2                  # 2nd primary, secondary
    mapping = map_clusters(g, cluster, slices, cost, allowed)
    assert mapping.merged.tolist() == [2]
    assert mapping.device[index["b"]] == mapping.device[index["s"]] != mapping.device[index["b2"]]


def test_lalb_uses_the_work_within_the_span_not_the_total():
    """Thesis Fig. 4.2(d, e): primary q has less work overall but more within the
    span of the secondary cluster x (q1 runs while p1, p1b run), so LALB puts x
    with p, where GLB would put it with q."""
    nodes = {"p0": 10, "q0": 10, "p1": 35, "q1": 200, "p1b": 35, "x": 60, "p2": 300, "p3": 1, "q2": 1}
    edges = [("p0", "p1", 0), ("p1", "p1b", 0), ("p1b", "p2", 0), ("p2", "p3", 0),
             ("q0", "q1", 0), ("q1", "q2", 0), ("p0", "x", 0), ("x", "p2", 0)]
    g = build(nodes, edges)
    cluster = link(2, latency=1.0)
    cost = mean_edge_costs(g, cluster)
    slices = slice_graph(g, 2, cost, np.ones((g.num_groups, 2), bool))
    index = g.index()
    assert slices.num_clusters == 3 and slices.cluster[index["x"]] == 2
    mapping = map_clusters(g, cluster, slices, cost, allowed_devices(g, cluster))
    dev = mapping.device
    p, q = dev[index["p0"]], dev[index["q0"]]
    assert np.bincount(dev, g.comp_us)[q] < np.bincount(dev, g.comp_us)[p]   # q lighter overall
    assert dev[index["x"]] == p and mapping.merged.size == 0


def test_same_input_gives_the_same_placement():
    g = synth_graph(3000, seed=3)
    cluster = parse_devices("gpu:4")
    first, second = place(g, cluster, {}, emulate=emulate), place(g, cluster, {}, emulate=emulate)
    assert first.dtype == np.int32 and np.array_equal(first, second)


def mixed_cluster():
    """Two GPUs and one CPU with uniform links."""
    kinds = ["GPU", "GPU", "CPU"]
    devices = tuple(Device(f"/job:localhost/replica:0/task:0/device:{k}:{i}", k, 2**34)
                    for i, k in enumerate(kinds))
    lat = np.full((3, 3), 10.0)
    np.fill_diagonal(lat, 0.0)
    bw = np.full((3, 3), 1e4)
    np.fill_diagonal(bw, np.inf)
    return Cluster(devices, lat, bw)


@pytest.mark.parametrize("seed", [0, 1])
def test_groups_and_pins_are_respected(seed):
    g0 = synth_graph(2000, seed=seed)
    rng = np.random.default_rng(seed)
    pinned = np.where(rng.random(g0.num_nodes) < 0.05, "CPU", "").tolist()
    doc = g0.to_dict()
    for node, pin in zip(doc["nodes"], pinned):
        node["pinned"] = pin or None
    g = CostGraph.from_dict(doc)
    cluster = mixed_cluster()
    device = place(g, cluster, {}, emulate=emulate)
    assert violations(g, cluster, device) == []
    pinned_groups = np.unique(g.group[[i for i, p in enumerate(g.pinned) if p]])
    assert np.all(device[np.isin(g.group, pinned_groups)] == 2)
    assert len(np.unique(device)) == 3


@pytest.mark.parametrize("spec", ["gpu:2", "dgx1-v100:8"])
def test_refinement_never_makes_the_emulated_makespan_worse(spec):
    g = synth_graph(4000, seed=5)
    cluster = parse_devices(spec)
    result = partition(g, cluster, emulate=emulate)
    assert result.makespan_us <= result.mapped_makespan_us
    assert result.makespan_us == simulate(g, cluster, result.device).makespan
    assert np.array_equal(result.schedule.finish, simulate(g, cluster, result.device).finish)
    assert result.mapped_makespan_us == simulate(g, cluster, result.mapped).makespan


@pytest.mark.parametrize("seed, spec", [(1, "gpu:4"), (2, "dgx1-v100:8"), (3, "cpu:3")])
def test_pruning_trials_by_the_lower_bound_changes_no_placement(monkeypatch, seed, spec):
    from pardnn.emulator import trial
    g = synth_graph(3000, seed=seed)
    cluster = parse_devices(spec)
    pruned = partition(g, cluster, emulate=emulate)
    monkeypatch.setattr(trial, "cannot_beat", lambda *args: False)
    assert np.array_equal(partition(g, cluster, emulate=emulate).device, pruned.device)


def test_one_device_and_tiny_graphs():
    g = build({"a": 1, "b": 2}, [("a", "b", 10)])
    assert place(g, link(1), {}, emulate=emulate).tolist() == [0, 0]
    assert len(set(place(g, link(8), {}, emulate=emulate).tolist())) == 1           # one path, one device
    lone = CostGraph.build(names=["only"], comp_us=[3.0])
    assert place(lone, link(4), {}, emulate=emulate).tolist() == [0]


def test_place_cli_defaults_to_pardnn(tmp_path):
    g = synth_graph(500, seed=1)
    path = tmp_path / "g.json"
    g.to_json(path)
    out = tmp_path / "out"
    assert main(["place", str(path), "--devices", "gpu:2", "-o", str(out)]) == 0
    report = json.loads((out / "report.json").read_text())
    assert report["algorithm"] == "pardnn"
    assert {"slicing", "mapping", "refine"} <= set(report["stage_seconds"])


def test_never_slower_than_one_device_when_transfers_cannot_pay():
    g = build({"s": 1, "a": 2, "b": 2, "c": 2, "t": 1},
              [("s", "a", 8), ("s", "b", 8), ("s", "c", 8), ("a", "t", 8), ("b", "t", 8), ("c", "t", 8)])
    cluster = link(4, latency=100.0)
    result = partition(g, cluster, emulate=emulate)
    assert result.makespan_us == g.total_work_us() < result.mapped_makespan_us
    assert len(set(result.device.tolist())) == 1


def test_an_op_a_critical_chain_queues_behind_leaves_the_device():
    """x (10 us) and the chain c0..c4 (2 us each) are ready together on device 0;
    FIFO runs x first, so the chain waits 10 us. The unblocking move sends x to the
    idle device 1 and the step drops from 20 to 10 us."""
    nodes = {"x": 10.0} | {f"c{i}": 2.0 for i in range(5)}
    g = build(nodes, [(f"c{i}", f"c{i + 1}", 8) for i in range(4)])
    cluster = link(2)
    device = np.zeros(g.num_nodes, np.int32)
    schedule = simulate(g, cluster, device)
    assert schedule.makespan == pytest.approx(20.0)
    moves = unblock_moves(g, cluster, device, schedule, allowed_devices(g, cluster))
    x = g.index()["x"]
    assert moves == [(pytest.approx(10.0), int(g.group[x]), 1)]
    device[x] = 1
    assert simulate(g, cluster, device).makespan == pytest.approx(10.0)


def cost_by_device_reference(g, cluster, device, groups):
    """Each listed group's transfer time to the rest were it on device j, summed edge
    by edge: the edges it sends, then those it receives, each in edge order."""
    k, inv = cluster.num_devices, (1.0 / cluster.bandwidth).tolist()
    row = {group: i for i, group in enumerate(groups.tolist())}
    cost = [[0.0] * k for _ in row]
    for receiving in (False, True):
        for e in range(g.num_edges):
            src, dst = int(g.edge_src[e]), int(g.edge_dst[e])
            mine, other = (dst, src) if receiving else (src, dst)
            if int(g.group[mine]) not in row or g.group[src] == g.group[dst]:
                continue
            for j in range(k):
                a, b = (int(device[other]), j) if receiving else (j, int(device[other]))
                if a != b:
                    cost[row[int(g.group[mine])]][j] += cluster.latency_us[a, b] + int(g.edge_bytes[e]) * inv[a][b]
    return np.array(cost).reshape(len(row), k)


@pytest.mark.parametrize("seed", range(6))
def test_communication_costs_by_device_on_uneven_links(seed):
    """comm_moves' costs per group and device, to the bit, on links of several speeds
    (the nodes of one DGX and the link between two)."""
    from pardnn.placers.step1_phases.volume import _cost_by_device
    g = synth_graph(300, seed=seed, shape="chain" if seed % 2 else "dag")
    cluster = parse_devices(["dgx1-v100:8", "2xdgx-h100:2", "cpu:3"][seed % 3])
    rng = np.random.default_rng(seed)
    device = rng.integers(0, cluster.num_devices, g.num_nodes)
    groups = np.flatnonzero(rng.random(g.num_groups) < 0.5)
    assert np.array_equal(_cost_by_device(g, cluster, device, groups),
                          cost_by_device_reference(g, cluster, device, groups))


def test_a_finder_that_found_nothing_is_asked_again_only_after_a_batch_is_kept(monkeypatch):
    """move_rounds: the first finder's first batch wins once; afterwards nothing wins. The
    other finders, fruitless on that placement, are not asked again in the next round
    (it is the same placement), and the first is asked again once (it is not)."""
    from types import SimpleNamespace

    from pardnn.placers.step1_phases import refinement
    g = build({"a": 1.0, "b": 1.0, "c": 1.0}, [("a", "b", 1), ("b", "c", 1)])
    asked = []

    def finder(name):
        def find(graph, cluster, device, schedule, allowed):
            asked.append(name)
            return [(1.0, 0, 1)]
        return find
    monkeypatch.setattr(refinement, "MOVE_FINDERS", (finder("critical"), finder("unblock"), finder("follow")))
    wins = iter([True])

    def judge(trial, beat):
        return (trial, 50.0, SimpleNamespace(makespan=50.0)) if next(wins, False) else None
    kept = []
    device, result, late = refinement.move_rounds(
        g, None, np.zeros(3, np.int32), SimpleNamespace(makespan=100.0), None, judge, rounds=5,
        kept=lambda f, r, nodes: kept.append(nodes))
    assert asked == ["critical", "unblock", "follow", "critical"]
    assert kept == [1] and list(device) == [1, 0, 0] and result.makespan == 50.0 and not late

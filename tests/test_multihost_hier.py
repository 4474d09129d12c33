"""Hierarchical placement (`--algorithm pardnn-hier`) on hand-made multi-host clusters."""

import json
from dataclasses import replace

import numpy as np
import pytest

from pardnn.pipeline.place import place
from pardnn.emulator.trial import emulate
from pardnn.placers import hierarchical
from pardnn.placers import step1
from pardnn.cli import main
from pardnn.hardware import GBps, Cluster, Device, Host, parse_devices
from pardnn.hardware.cluster_file import compose
from pardnn.hardware.hosts import host_cluster
from pardnn.graph.constraints import violations
from pardnn.emulator.scheduler import simulate
from pardnn.base.errors import UserError
from pardnn.graph import CostGraph

from tools.synth_graph import synth_graph


def two_hosts(inter_bandwidth=25 * GBps, per_host=2):
    """Two hosts of `per_host` GPUs: 450 GB/s inside a host, `inter_bandwidth` between."""
    return compose(parse_devices(f"dgx-h100:{per_host}"), 2, inter_latency=10.0,
                   inter_bandwidth=inter_bandwidth)


def two_diamonds():
    """Two independent diamonds s -> {a, b} -> t; a and b take 1000 us each and every
    edge carries 1 MB. The best plan: one diamond per host, a and b on the two
    devices of their host (4.4 us per 1 MB hop at 450 GB/s)."""
    nodes, edges = {}, []
    for c in "xy":
        nodes |= {f"{c}s": 1.0, f"{c}a": 1000.0, f"{c}b": 1000.0, f"{c}t": 1.0}
        edges += [(f"{c}s", f"{c}a"), (f"{c}s", f"{c}b"), (f"{c}a", f"{c}t"), (f"{c}b", f"{c}t")]
    src, dst = zip(*edges)
    return CostGraph.build(names=list(nodes), comp_us=list(nodes.values()), edge_src=list(src),
                           edge_dst=list(dst), edge_bytes=[10**6] * len(edges))


def test_host_level_cluster_sums_memory_and_averages_links():
    c = two_hosts()
    lat = c.latency_us.copy()
    lat[0, 2], lat[0, 3] = 30.0, 50.0                 # host 0 -> host 1: 30, 50, 10, 10
    bw = c.bandwidth.copy()
    bw[0, 2] = 5 * GBps                               # 5, 25, 25, 25 GB/s
    hosts = hierarchical.host_level_cluster(Cluster(c.devices, lat, bw, hosts=c.hosts))
    assert hosts.num_devices == 2 and hosts.memory.tolist() == [2 * c.memory[0]] * 2
    assert hosts.latency_us[0, 1] == pytest.approx(25.0) and hosts.latency_us[1, 0] == pytest.approx(10.0)
    assert hosts.bandwidth[0, 1] == pytest.approx(4 / (1 / 5 + 3 / 25) * GBps)
    assert hosts.names[1] == "/job:worker/task:1/device:HOST:0"


def test_host_cluster_keeps_one_hosts_devices_and_links():
    c = two_hosts()
    h1 = host_cluster(c, 1)
    assert h1.names == ["/job:worker/task:1/device:GPU:0", "/job:worker/task:1/device:GPU:1"]
    assert h1.hosts == (c.hosts[1],) and h1.host_of.tolist() == [0, 0]
    assert h1.bandwidth[0, 1] == pytest.approx(450 * GBps)


def test_subgraph_is_the_induced_subgraph():
    g = synth_graph(300, seed=4)
    nodes = np.flatnonzero(np.arange(g.num_nodes) % 3 != 1)
    sub = hierarchical.subgraph(g, nodes)
    full = g.to_networkx()
    want = {(g.names[u], g.names[v]) for u, v in full.subgraph(nodes.tolist()).edges}
    got = set(zip((sub.names[i] for i in sub.edge_src), (sub.names[i] for i in sub.edge_dst)))
    assert got == want
    assert list(sub.names) == [g.names[i] for i in nodes]                 # order kept
    assert np.array_equal(sub.comp_us, g.comp_us[nodes])
    same_group = g.group[nodes][:, None] == g.group[nodes][None, :]
    assert np.array_equal(same_group, sub.group[:, None] == sub.group[None, :])


def test_one_diamond_per_host_and_one_branch_per_device():
    g, c = two_diamonds(), two_hosts()
    timings = {}
    device = hierarchical.place(g, c, timings, emulate=emulate)
    index = g.index()
    host = {name: int(c.host_of[device[i]]) for name, i in index.items()}
    assert len({host[f"x{k}"] for k in "sabt"}) == 1 and len({host[f"y{k}"] for k in "sabt"}) == 1
    assert host["xs"] != host["ys"]
    assert device[index["xa"]] != device[index["xb"]] and device[index["ya"]] != device[index["yb"]]
    # s, a (b after one 1 MB hop: 8 us latency + 1e6 bytes at 450 GB/s), t after one hop
    hop = 8.0 + 1e6 / (450 * GBps)
    assert simulate(g, c, device).makespan == pytest.approx(1 + 1000 + hop + 1)
    assert {"split_hosts", "within_hosts", "one_host", "choose"} <= set(timings)


def four_branches():
    """s -> {a, b, c, d} -> t, 1000 us per branch, 1 MB per edge."""
    names = ["s", "a", "b", "c", "d", "t"]
    src = ["s"] * 4 + ["a", "b", "c", "d"]
    dst = ["a", "b", "c", "d"] + ["t"] * 4
    return CostGraph.build(names=names, comp_us=[1, 1000, 1000, 1000, 1000, 1], edge_src=src,
                           edge_dst=dst, edge_bytes=[10**6] * 8)


def test_fast_links_between_hosts_use_every_device():
    g, c = four_branches(), two_hosts()            # 1 MB costs 50 us between hosts
    device = hierarchical.place(g, c, {}, emulate=emulate)
    assert len(set(device.tolist())) == 4
    assert simulate(g, c, device).makespan < 1200   # vs 2000+ on one host


def test_slow_links_between_hosts_keep_everything_on_one_host():
    g, c = four_branches(), two_hosts(inter_bandwidth=1e-3)     # 1 KB/s between hosts
    device = hierarchical.place(g, c, {}, emulate=emulate)
    assert set(c.host_of[device].tolist()) == {0} and len(set(device.tolist())) == 2
    assert simulate(g, c, device).makespan < 2100              # two branches per device


def test_one_host_is_the_inner_placer():
    g, c = synth_graph(400, seed=1), parse_devices("dgx-h100:4")
    alone = step1.place(g, c, {}, emulate=emulate)
    assert np.array_equal(hierarchical.place(g, c, {}, emulate=emulate), alone)


@pytest.mark.parametrize("spec", ["2xdgx-h100:4", "3xcpu:2"])
def test_groups_stay_whole_and_pins_hold(spec):
    g = synth_graph(2000, seed=7)
    pinned = tuple("GPU" if i % 97 == 0 else p for i, p in enumerate(g.pinned))
    g = replace(g, pinned=pinned)
    c = parse_devices(spec)
    device = hierarchical.place(g, c, {}, emulate=emulate)
    assert violations(g, c, device) == []


def test_hosts_with_different_device_kinds_are_refused():
    gpu = Device("/job:worker/task:0/device:GPU:0", "GPU", 2**30, 0)
    cpu = Device("/job:worker/task:1/device:CPU:0", "CPU", 2**30, 1)
    c = Cluster((gpu, cpu), np.array([[0, 10.0], [10.0, 0]]), np.array([[np.inf, 1e3], [1e3, np.inf]]),
                hosts=(Host("/job:worker/task:0"), Host("/job:worker/task:1")))
    with pytest.raises(UserError, match="same device kinds"):
        hierarchical.place(two_diamonds(), c, {}, emulate=emulate)


def test_compare_shows_flat_and_hierarchical(tmp_path, capsys):
    path = tmp_path / "g.json"
    synth_graph(600, seed=2).to_json(path)
    assert main(["compare", str(path), "--devices", "2xdgx-h100:2", "--algorithms", "pardnn,pardnn-hier",
                 "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["results"]
    assert [r["algorithm"] for r in rows] == ["pardnn", "pardnn-hier"]
    g, cluster = synth_graph(600, seed=2), parse_devices("2xdgx-h100:2")
    for row in rows:                      # what placing alone gives, never below the work bound
        _, report = place(g, cluster, row["algorithm"])
        assert row["makespan_us"] == pytest.approx(report.makespan_us)
        assert row["makespan_us"] >= g.total_work_us() / cluster.num_devices


def test_pardnn_on_several_hosts_is_never_slower_than_pardnn_hier():
    # slow links between hosts: the hierarchical plan is a candidate of --algorithm pardnn
    g = synth_graph(3000, seed=3)
    cluster = compose(parse_devices("dgx-h100:2"), 2, inter_latency=50.0, inter_bandwidth=1 * GBps)
    _, flat = place(g, cluster, "pardnn")
    _, hier = place(g, cluster, "pardnn-hier")
    assert "hier" in flat.candidates
    assert flat.makespan_us <= hier.makespan_us * (1 + 1e-9)


def test_pardnn_on_one_host_has_no_hierarchical_candidate():
    _, report = place(synth_graph(500, seed=1), parse_devices("dgx-h100:4"), "pardnn")
    assert "hier" not in report.candidates

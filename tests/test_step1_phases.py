"""Parts of step 1's phases (pardnn.placers.step1_phases) on small hand-made inputs
whose right answer is known by hand."""

import dataclasses
from types import SimpleNamespace

import numpy as np
import pytest

from pardnn.graph import CostGraph
from pardnn.hardware import parse_devices
from pardnn.placers.step1_phases.cut_edges import ClusterLinks
from pardnn.placers.step1_phases.fenwick import FenwickTree
from pardnn.placers.step1_phases.mapping import _primary_devices
from pardnn.placers.step1_phases.slicing import Slices
from pardnn.placers.step1_phases.swapping import _level_prefix


def test_range_sum_cancels_the_shared_high_bits_exactly():
    # levels 5..5 are positions 6 - 5 of the tree; both chains end in position 4
    # (levels 0..3), which holds 1e16: cancelled, not subtracted, 1.0 survives
    levels = np.zeros((1, 8))
    levels[0, 0], levels[0, 5] = 1e16, 1.0
    tree = FenwickTree(levels)
    assert tree.range_sum(5, 6).tolist() == [1.0]
    assert tree.range_sum(4, 6).tolist() == [1.0]


@pytest.mark.parametrize("size", [1, 2, 5, 8, 13])
def test_level_prefix_is_the_cumsum_of_the_levels(size):
    levels = np.arange(1.0, 2 * size + 1).reshape(2, size) ** 2
    tree = FenwickTree(levels)
    got = _level_prefix.interpreted(tree.tree)
    want = np.vstack([np.zeros((1, 2)), np.cumsum(levels.T, axis=0)])
    assert got.tolist() == want.tolist()


def test_primary_j_takes_device_j_unless_taken():
    ok = np.array([[False, True, True], [True, True, True], [True, True, True]])
    # primary 0 may not use device 0: the first free (1); primary 1's own device is
    # taken, so it gets the first free (0); primary 2 keeps its own
    assert _primary_devices(ok).tolist() == [1, 0, 2]


def three_clusters():
    """a -> b -> c -> d, clusters {a, b}, {c}, {d}; 1000 bytes per edge."""
    g = CostGraph.build(names=list("abcd"), comp_us=[1.0] * 4, group=list("abcd"),
                        edge_src=list("abc"), edge_dst=list("bcd"), edge_bytes=[1000] * 3)
    slices = SimpleNamespace(cluster=np.array([0, 0, 1, 2]), num_clusters=3)
    return g, slices


def test_cluster_links_members_and_same_device_costs_nothing():
    g, slices = three_clusters()
    cluster = parse_devices("gpu:2")
    links = ClusterLinks(g, cluster, slices, np.array([0, 1, -1]))
    assert links.members == [[0, 1], [2], [3]]
    # cluster 1 ({c}): an in-edge from b (device 0), an out-edge to d (unmapped)
    assert links.counts(1).tolist() == [[0, 0], [0, 0], [1, 0], [1000, 0]]
    lat, bw = cluster.latency_us[0, 1], cluster.bandwidth[0, 1]
    assert links.comm_cost(1).tolist() == [0.0, lat + 1000 / bw]


def test_slices_are_immutable():
    s = Slices(np.zeros(1, np.int64), np.zeros(1, np.int64), np.zeros(1, np.int64), 1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.num_primary = 2


def test_comm_moves_both_ends_of_a_heavy_edge_and_no_zero_gain():
    from pardnn.graph.constraints import allowed_devices
    from pardnn.placers.step1_phases.volume import comm_moves

    # a -> b, 1e6 bytes (about 42 us on a gpu:2 link) across devices; a costs 1 us,
    # b 2 us: moving either to the other's device saves the transfer less its work
    g = CostGraph.build(names=["a", "b"], comp_us=[1.0, 2.0], group=["a", "b"],
                        edge_src=["a"], edge_dst=["b"], edge_bytes=[10**6])
    cluster = parse_devices("gpu:2")
    allowed = allowed_devices(g, cluster)
    moves = comm_moves(g, cluster, np.array([0, 1]), allowed)
    assert [(grp, dev) for _, grp, dev in moves] == [(0, 1), (1, 0)]
    assert moves[0][0] - moves[1][0] == pytest.approx(1.0)
    # a -> b -> c, work free, b -> c heavier and on one device: b is already where
    # it costs least (gain exactly 0, not a move); only a moves
    g0 = CostGraph.build(names=list("abc"), comp_us=[0.0] * 3, group=list("abc"),
                         edge_src=["a", "b"], edge_dst=["b", "c"], edge_bytes=[10**6, 10**7])
    moves = comm_moves(g0, cluster, np.array([0, 1, 1]), allowed_devices(g0, cluster))
    assert [(grp, dev) for _, grp, dev in moves] == [(0, 1)]


def two_ops():
    return CostGraph.build(names=["a", "b"], comp_us=[5.0, 5.0], group=["a", "b"],
                           edge_src=["a"], edge_dst=["b"], edge_bytes=[100])


def test_affinity_kept_only_when_the_emulator_finds_it_faster():
    from pardnn.graph.constraints import allowed_devices
    from pardnn.placers.step1_phases.refinement import _affinity_if_faster

    g, cluster = two_ops(), parse_devices("gpu:2")
    device, schedule = np.array([0, 1]), SimpleNamespace(makespan=1.0)
    out = _affinity_if_faster(g, cluster, device, schedule, allowed_devices(g, cluster),
                              lambda *args: None)
    assert out[0] is device and out[1] is schedule and out[2] is False


def test_one_device_only_when_one_device_may_hold_every_group():
    from pardnn.placers.step1_phases.refinement import _one_device_if_faster

    def emulate(*args):
        raise AssertionError("no device may hold both groups: nothing to emulate")

    g, cluster = two_ops(), parse_devices("gpu:2")
    device, schedule = np.array([0, 1]), SimpleNamespace(makespan=1e6)
    allowed = np.array([[True, False], [False, True]])     # a only on 0, b only on 1
    out = _one_device_if_faster(g, cluster, device, schedule, allowed, emulate)
    assert out[0] is device and out[1] is schedule and out[2] is False


@pytest.mark.parametrize("seed", range(3))
def test_every_path_stays_in_its_cluster(seed):
    from pardnn.graph.constraints import allowed_devices
    from pardnn.graph.edge_costs import mean_edge_costs
    from pardnn.placers.step1_phases.slicing import slice_graph
    from tools.synth_graph import synth_graph

    g = synth_graph(400, seed=seed)
    cluster = parse_devices("gpu:4")
    s = slice_graph(g, 4, mean_edge_costs(g, cluster), allowed_devices(g, cluster))
    clusters = np.arange(s.num_clusters)
    assert s.cluster[s.head].tolist() == clusters.tolist()
    assert s.cluster[s.tail].tolist() == clusters.tolist()


def test_step1_places_an_empty_graph_in_no_time():
    from pardnn.emulator.trial import emulate
    from pardnn.placers.step1 import partition

    g = CostGraph.build(names=[], comp_us=[], group=[], edge_src=[], edge_dst=[], edge_bytes=[])
    out = partition(g, parse_devices("gpu:2"), emulate=emulate)
    assert out.device.tolist() == [] and out.makespan_us == 0.0


def test_a_moved_nodes_inputs_cross_the_link_towards_it():
    from pardnn.emulator.scheduler import simulate
    from pardnn.placers.step1_phases.switching import _Timing

    # a -> b (1e6 bytes), 10 us each, both on device 0; b moved to device 1 gets a's
    # output over the 0 -> 1 link (5 us + 1e6 B / 1e5 B/us), not the slower 1 -> 0
    g = CostGraph.build(names=["a", "b"], comp_us=[10.0, 10.0], group=["a", "b"],
                        edge_src=["a"], edge_dst=["b"], edge_bytes=[10**6])
    device = np.array([0, 0])
    schedule = simulate(g, parse_devices("gpu:2"), device)
    links = SimpleNamespace(num_devices=2, latency_us=np.array([[0.0, 5.0], [50.0, 0.0]]),
                            bandwidth=np.array([[np.inf, 1e5], [1e4, np.inf]]))
    timing = _Timing(g, links, device, schedule, np.ones((2, 2), bool))
    assert timing.moved_finish(np.array([1]), np.array([1]), np.array([np.inf])).tolist() == [35.0]

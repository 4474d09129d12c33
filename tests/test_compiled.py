"""Every kernel (pardnn.compiled) gives, compiled by numba, exactly what its interpreted
twin gives, on random graphs with ties; and the size rule picks the twin on small
graphs, the compiled kernel on large ones."""

import sys
from pathlib import Path

import numpy as np
import pytest

from pardnn.compiled import INTERPRETED_BELOW, Kernel, kernel
from pardnn.emulator.event_loop import event_loop
from pardnn.emulator.scheduler import plan_transfers, simulate
from pardnn.graph.forced_levels import earliest_starts, input_pairs
from pardnn.graph.levels import _bottom_levels, _top_levels
from pardnn.hardware import parse_devices
from pardnn.placers.pardnn.switching import _critical_path, _moved_finish, _Timing

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
from synth_graph import synth_graph  # noqa: E402

CASES = 50


def random_graph(seed):
    """A small training-like graph; in most, many ops cost 0 or the same, so events tie."""
    rng = np.random.default_rng(seed)
    g = synth_graph(int(rng.integers(40, 400)), seed=seed, shape="chain" if seed % 2 else "dag")
    if seed % 3:
        g.comp_us[rng.random(g.num_nodes) < 0.3] = 0.0
        g.comp_us[rng.random(g.num_nodes) < 0.3] = 5.0
    return g, rng


def assert_same(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.dtype == y.dtype and np.array_equal(x, y)


@pytest.mark.parametrize("seed", range(CASES))
def test_event_loop(seed):
    g, rng = random_graph(seed)
    cluster = parse_devices(["cpu:3", "dgx1-v100:8", "2xdgx-h100:2", "cpu:2"][seed % 4])
    device = rng.integers(0, cluster.num_devices, g.num_nodes).astype(np.int64)
    edge_transfer, _, link, occupancy, latency = plan_transfers(g, cluster, device)
    args = (cluster.num_devices, np.asarray(g.comp_us, np.float64), device, *g.successor_arrays,
            edge_transfer, np.asarray(link, np.int64), np.asarray(occupancy, np.float64),
            np.asarray(latency, np.float64), np.diff(g.pred_ptr).astype(np.int64))
    assert_same(event_loop.compiled(*args), event_loop.interpreted(*args))


def test_small_graphs_run_interpreted_large_ones_compiled():
    @kernel
    def double(x):
        return 2 * x
    assert isinstance(double, Kernel) and double.__name__ == "double"
    assert double.for_size(INTERPRETED_BELOW - 1) is double.interpreted
    assert double.for_size(INTERPRETED_BELOW) is double.compiled
    assert double.compiled(21) == double.interpreted(21) == 42


@pytest.mark.parametrize("seed", range(CASES))
def test_level_sweeps(seed):
    g, rng = random_graph(seed)
    w = np.asarray(g.comp_us, np.float64).copy()
    w[rng.random(g.num_nodes) < 0.1] = -np.inf                  # nodes removed by slicing
    ec = rng.choice([0.0, 1.0, 2.5], g.num_edges)
    for sweep in (_top_levels, _bottom_levels):
        assert_same([sweep.compiled(*g.successor_arrays, w, ec)], [sweep.interpreted(*g.successor_arrays, w, ec)])


@pytest.mark.parametrize("seed", range(CASES))
def test_move_finders(seed):
    """The critical path and the moved-finish estimates of a random placement, some
    groups kept off some devices, asked at deadlines that tie with the schedule's times."""
    g, rng = random_graph(seed)
    cluster = parse_devices(["cpu:3", "dgx1-v100:8", "2xdgx-h100:2", "cpu:2"][seed % 4])
    k = cluster.num_devices
    device = rng.integers(0, k, g.num_nodes).astype(np.int32)
    allowed = rng.random((g.num_groups, k)) < 0.7
    timing = _Timing(g, cluster, device, simulate(g, cluster, device), allowed)
    arrays = (timing.edges, timing.times, timing.busy)
    assert_same(_critical_path.compiled(*arrays), _critical_path.interpreted(*arrays))
    x, d = rng.integers(0, g.num_nodes, 300), rng.integers(0, k, 300)
    start, finish = timing.times.start[x], timing.times.finish[x]
    deadline = np.choose(rng.integers(0, 4, 300), [start, finish, finish + rng.uniform(0, 50, 300),
                                                   np.full(300, np.inf)])
    queries = (timing.links, x, d, deadline)
    assert_same([_moved_finish.compiled(*arrays, *queries)], [_moved_finish.interpreted(*arrays, *queries)])


@pytest.mark.parametrize("seed", range(CASES))
def test_forced_floors(seed):
    g, rng = random_graph(seed)
    comm = rng.choice([0.0, 2.5, rng.uniform(0, 30)], g.num_edges)      # ties, and inputs that
    comm[rng.random(g.num_edges) < 0.1] = np.inf                            # always share a device
    pairs = input_pairs(g.edge_src, g.edge_dst, comm, g.num_nodes)
    cost = np.asarray(g.comp_us, np.float64)
    for cap in (2, 64):     # a node's colocated inputs tried one by one: few, then the default
        compiled = earliest_starts.compiled(*pairs, cost, cap)
        assert_same([compiled], [earliest_starts.interpreted(*pairs, cost, cap)])

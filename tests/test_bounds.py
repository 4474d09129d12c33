"""The lower bounds in every report against the exact optimum: the best emulated step
over all placements, found by trying every one of them on small random graphs."""

import itertools

import numpy as np
import pytest

from pardnn.pipeline.report import evaluate
from pardnn.emulator.bounds import step_lower_bound_us
from pardnn.emulator.scheduler import simulate
from pardnn.graph import CostGraph
from pardnn.graph.constraints import violations
from pardnn.graph.levels import critical_path_us
from pardnn.hardware import Cluster, Device, parse_devices
from pardnn.placers import exact


def cluster(k, latency=0.0, bandwidth=float("inf")):
    return parse_devices(f"cpu:{k}").with_options(latency=latency, bandwidth=bandwidth)


def random_case(seed):
    """A random DAG of 2-7 nodes (some sharing a colocation group, some tensors read
    twice) on 2 or 3 devices with random links."""
    rng = np.random.default_rng(seed)
    n, k = int(rng.integers(2, 8)), int(rng.integers(2, 4))
    edges = sorted({(int(u), int(v)) for u, v in rng.integers(0, n, (2 * n, 2)) if u < v})
    group = [int(g) for g in rng.integers(0, n, n)] if seed % 3 == 0 else None
    g = CostGraph.build(names=[f"n{i}" for i in range(n)], comp_us=rng.uniform(0, 20, n).round(2).tolist(),
                        out_bytes=[100] * n, group=group, edge_src=[u for u, _ in edges],
                        edge_dst=[v for _, v in edges], edge_slot=rng.integers(0, 2, len(edges)).tolist(),
                        edge_bytes=rng.integers(0, 3000, len(edges)).tolist())
    return g, cluster(k, latency=float(rng.uniform(0, 5)), bandwidth=float(rng.uniform(50, 500)))


def optimum_us(g, c):
    """The shortest emulated step over every placement that keeps groups whole."""
    best = float("inf")
    for per_group in itertools.product(range(c.num_devices), repeat=g.num_groups):
        best = min(best, simulate(g, c, np.asarray(per_group)[g.group]).makespan)
    return best


@pytest.mark.parametrize("seed", range(40))
def test_the_step_bound_never_exceeds_the_best_placement(seed):
    g, c = random_case(seed)
    bound = step_lower_bound_us(g, c)
    assert max(critical_path_us(g), g.total_work_us() / c.num_devices) <= max(bound, critical_path_us(g))
    assert bound <= optimum_us(g, c) * (1 + 1e-12)


def test_a_fork_pays_a_transfer_or_runs_in_series():
    # a -> b, a -> c, 10 us each, 100 us transfers: 30 us on one device is the best step,
    # which the bound finds; max(critical path, work / K) says 20
    g = CostGraph.build(names=["a", "b", "c"], comp_us=[10, 10, 10], out_bytes=[8] * 3,
                        edge_src=["a", "a"], edge_dst=["b", "c"], edge_bytes=[8, 8])
    c = cluster(2, latency=100)
    assert step_lower_bound_us(g, c) == optimum_us(g, c) == 30
    assert evaluate(g, c, np.zeros(3, int)).lower_bound_us == 30


def test_cheap_transfers_give_the_critical_path():
    g = CostGraph.build(names=["a", "b", "c"], comp_us=[10, 10, 10], out_bytes=[8] * 3,
                        edge_src=["a", "a"], edge_dst=["b", "c"], edge_bytes=[8, 8])
    assert step_lower_bound_us(g, cluster(2, latency=1)) == 21 == optimum_us(g, cluster(2, latency=1))


def test_one_device_bounds_by_all_the_work():
    g, _ = random_case(7)
    assert step_lower_bound_us(g, cluster(1)) == pytest.approx(g.total_work_us())


@pytest.mark.parametrize("seed", [0, 3, 5, 11, 12, 17])
def test_the_exact_models_bound_never_exceeds_the_best_placement(seed):
    g, c = random_case(seed)
    solved = exact.solve(g, c)
    best = optimum_us(g, c)
    assert solved.bound_us <= best * (1 + 1e-12)
    assert solved.optimal and solved.bound_us >= step_lower_bound_us(g, c) * (1 - 1e-3)   # times on a grid
    for device in solved.placements:
        assert violations(g, c, device) == []


def test_the_exact_candidate_finds_the_best_placement_of_a_fork():
    # three 10 us ops fed by one 1 us op, 5 us transfers: one branch beside the root,
    # the other two on the other devices (1 + 5 + 10 = 16 us)
    g = CostGraph.build(names=["r", "a", "b", "c"], comp_us=[1, 10, 10, 10], out_bytes=[8] * 4,
                        edge_src=["r"] * 3, edge_dst=["a", "b", "c"], edge_bytes=[0] * 3)
    c = cluster(3, latency=5)
    device = exact.place(g, c)
    assert simulate(g, c, device).makespan == optimum_us(g, c) == 16
    assert exact.solve(g, c).bound_us == pytest.approx(16, rel=1e-5)


def test_the_exact_candidate_keeps_colocation_groups_and_pins():
    g = CostGraph.build(names=["v", "r", "m", "x"], comp_us=[0, 1, 10, 10], out_bytes=[8] * 4,
                        group=[0, 0, 1, 2], pinned=["CPU", "", "", ""],
                        edge_src=["v", "r", "r"], edge_dst=["r", "m", "x"], edge_bytes=[8] * 3)
    devices = (Device("/device:GPU:0", "GPU", 2**30), Device("/device:GPU:1", "GPU", 2**30),
               Device("/device:CPU:0", "CPU", 2**30))
    c = Cluster(devices, np.full((3, 3), 0.5) - 0.5 * np.eye(3), np.full((3, 3), 100.0))
    device = exact.place(g, c)
    assert violations(g, c, device) == []
    assert device[0] == device[1] == 2


def test_the_exact_candidate_is_deterministic():
    first = exact.solve(*random_case(21))           # two graph objects: two solves
    second = exact.solve(*random_case(21))
    assert first.bound_us == second.bound_us
    assert all(np.array_equal(a, b) for a, b in zip(first.placements, second.placements))

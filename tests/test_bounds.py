"""The lower bounds in every report against the exact optimum: the best emulated step
over all placements, found by trying every one of them on small random graphs."""

import itertools
import json

import numpy as np
import pytest

from pardnn.pipeline.report import evaluate
from pardnn.pipeline.bounds import PARTS, step_lower_bound
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
    bound = step_lower_bound(g, c, exact_model=False).us
    assert max(critical_path_us(g), g.total_work_us() / c.num_devices) <= max(bound, critical_path_us(g))
    assert bound <= optimum_us(g, c) * (1 + 1e-12)


def test_a_fork_pays_a_transfer_or_runs_in_series():
    # a -> b, a -> c, 10 us each, 100 us transfers: 30 us on one device is the best step,
    # which the bound finds; max(critical path, work / K) says 20
    g = CostGraph.build(names=["a", "b", "c"], comp_us=[10, 10, 10], out_bytes=[8] * 3,
                        edge_src=["a", "a"], edge_dst=["b", "c"], edge_bytes=[8, 8])
    c = cluster(2, latency=100)
    assert step_lower_bound(g, c, exact_model=False).us == optimum_us(g, c) == 30
    assert evaluate(g, c, np.zeros(3, int)).lower_bound_us == 30


def test_cheap_transfers_give_the_critical_path():
    g = CostGraph.build(names=["a", "b", "c"], comp_us=[10, 10, 10], out_bytes=[8] * 3,
                        edge_src=["a", "a"], edge_dst=["b", "c"], edge_bytes=[8, 8])
    assert step_lower_bound(g, cluster(2, latency=1), exact_model=False).us == 21 == optimum_us(g, cluster(2, latency=1))


def test_one_device_bounds_by_all_the_work():
    g, _ = random_case(7)
    assert step_lower_bound(g, cluster(1), exact_model=False).us == pytest.approx(g.total_work_us())


@pytest.mark.parametrize("seed", [0, 3, 5, 11, 12, 17])
def test_the_exact_models_bound_never_exceeds_the_best_placement(seed):
    g, c = random_case(seed)
    solved = exact.solve(g, c)
    best = optimum_us(g, c)
    assert solved.bound_us <= best * (1 + 1e-12)
    assert solved.optimal and solved.bound_us >= step_lower_bound(g, c, exact_model=False).us * (1 - 1e-3)   # times on a grid
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


# ------------------------------------------- devices faster and slower than the profile
def two_speeds_file(tmp_path, fast=2.0, slow=0.5):
    """A cluster file: GPU:0 `fast` times the profile's speed, GPU:1 `slow` times it."""
    path = tmp_path / "speeds.json"
    path.write_text(json.dumps({
        "format": "pardnn-cluster", "version": 1,
        "hosts": [{"task": "/job:localhost/replica:0/task:0",
                   "devices": [{"name": "GPU:0", "memory": "1GiB", "rate": fast},
                               {"name": "GPU:1", "memory": "1GiB", "rate": {"compute": slow, "memory": slow}}]}],
        "intra_host": {"latency": "100us", "bandwidth": "1GB/s"}}))
    return str(path)


def chain(n=3, us=10.0, op="AddV2"):
    return CostGraph.build(names=[f"n{i}" for i in range(n)], ops=[op] * n, comp_us=[us] * n,
                           out_bytes=[8] * n, edge_src=list(range(n - 1)), edge_dst=list(range(1, n)),
                           edge_bytes=[8] * (n - 1))


def test_every_part_counts_a_device_faster_than_the_profile(tmp_path):
    """A chain of three 10 us ops, one device twice the profile's speed and one half:
    all on the fast one, 15 us, is the best step. At the profile's speed the critical
    path alone would claim 30 us, twice what that placement takes."""
    g, c = chain(), parse_devices(two_speeds_file(tmp_path))
    assert c.rates.tolist() == [[2.0, 0.5], [2.0, 0.5]]
    bound = step_lower_bound(g, c)
    assert optimum_us(g, c) == 15.0
    assert bound.critical_path_us == 15.0 and bound.forced_transfers_us == 15.0
    assert bound.work_per_device_us == pytest.approx(30.0 / 2.5)       # 30 us of work at 2 + 0.5
    assert bound.exact_model_us is None            # its model gives each op one duration
    assert bound.us == 15.0 and bound.binding == "critical_path_us"
    assert evaluate(g, c, np.zeros(3, int)).lower_bound_us == 15.0


def random_case_at_speeds(seed):
    """random_case's graph with a MatMul or an element-wise op per node, on its devices
    at rates above and below the profile's: the first faster at MatMuls, the second at
    the rest, a third (if any) slower at both."""
    g, c = random_case(seed)
    rng = np.random.default_rng(1000 + seed)
    g = CostGraph.build(names=list(g.names), ops=rng.choice(["MatMul", "AddV2"], g.num_nodes).tolist(),
                        comp_us=g.comp_us.tolist(), out_bytes=g.out_bytes.tolist(), group=g.group.tolist(),
                        edge_src=g.edge_src.tolist(), edge_dst=g.edge_dst.tolist(),
                        edge_slot=g.edge_slot.tolist(), edge_bytes=g.edge_bytes.tolist())
    rates = [(3.0, 0.5), (0.5, 2.0), (0.25, 0.5)]
    devices = tuple(Device(d.name, d.kind, d.memory, compute_rate=rates[i][0], memory_rate=rates[i][1])
                    for i, d in enumerate(c.devices))
    return g, Cluster(devices, c.latency_us, c.bandwidth)


@pytest.mark.parametrize("seed", range(30))
def test_the_step_bound_never_exceeds_the_best_placement_on_devices_of_other_speeds(seed):
    """Every part holds on devices faster and slower than the profile, and is no looser
    than at the profile's speed where a device is faster at everything an op needs."""
    g, c = random_case_at_speeds(seed)
    bound = step_lower_bound(g, c)
    assert bound.us <= optimum_us(g, c) * (1 + 1e-12), bound
    best_times = g.comp_us / np.where(g.rate_class == 0, 3.0, 2.0)      # each op on its fastest device
    assert bound.critical_path_us == pytest.approx(critical_path_us(g, best_times))


def test_explain_and_report_give_one_bound_on_a_cluster_file_with_rates(tmp_path):
    """report.json's lower_bound_us and `pardnn explain`'s bounds are one function's:
    on a device twice the profile's speed both say 15 us for the chain (explain once took
    the critical path at the profile's speed, 30 us)."""
    from pardnn.cli import main
    graph, out, explained = tmp_path / "g.json", tmp_path / "placed", tmp_path / "explain.json"
    chain().to_json(graph)
    assert main(["place", str(graph), "--devices", two_speeds_file(tmp_path), "-o", str(out)]) == 0
    assert main(["explain", str(out), "--json", str(explained)]) == 0
    report, step = json.loads((out / "report.json").read_text()), json.loads(explained.read_text())["step"]
    assert report["lower_bound_us"] == step["lower_bound_us"] == 15.0
    assert step["bounds"]["critical_path_us"] == 15.0 and step["binding"] == "critical path"
    assert report["makespan_us"] >= report["lower_bound_us"]


def test_the_step_bound_is_one_dataclass_of_named_parts():
    g, c = random_case(5)
    bound = step_lower_bound(g, c)
    assert list(bound.parts) == [p for p in PARTS if getattr(bound, p) is not None]
    assert bound.us == max(bound.parts.values()) and bound.parts[bound.binding] == pytest.approx(bound.us, rel=1e-12)
    assert bound.exact_model_us is not None                 # 2-7 nodes at rate 1: the model runs
    without = step_lower_bound(g, c, exact_model=False)
    assert without.exact_model_us is None and step_lower_bound(g, c, emulated=without) == bound
    from pardnn.explain.step import BOUND_NAMES
    assert tuple(BOUND_NAMES) == PARTS

"""The memory repair's complete search (pardnn.repair.exhaustive) on devices that are not
interchangeable, against brute force: every placement of the colocation groups judged by
the emulator. The search renames devices only when that changes nothing (one capacity,
one kind, one link); on [191, 1, 191] bytes a search that took device 1 for device 2
would declare a graph that fits unfittable."""

import itertools
from dataclasses import replace

import numpy as np
import pytest

from tools.bench_exact_fit import random_case

from pardnn.emulator.memory import track_memory
from pardnn.emulator.scheduler import simulate
from pardnn.graph import CostGraph
from pardnn.graph.constraints import allowed_devices
from pardnn.hardware import parse_devices
from pardnn.pipeline import place as placer
from pardnn.pipeline.judge import judge
from pardnn.repair import exhaustive


def unequal(capacities, latency=1.0):
    """cpu:K with these capacities (no reserve), 1 us + bytes / (1 MB/us) links."""
    c = parse_devices(f"cpu:{len(capacities)}").with_options(memory=1, reserve=0.0, latency=latency,
                                                             bandwidth=1e6)
    return replace(c, devices=tuple(replace(d, memory=int(m)) for d, m in zip(c.devices, capacities)))


def peaks_of(graph, cluster):
    return lambda device: track_memory(graph, cluster, device, simulate(graph, cluster, device)).peak_bytes


def brute_force(graph, cluster) -> list:
    """Every group placement (tuple) whose emulated peaks fit every device."""
    peaks = peaks_of(graph, cluster)
    return [p for p in itertools.product(range(cluster.num_devices), repeat=graph.num_groups)
            if np.all(peaks(np.asarray(p, np.int64)[graph.group]) <= cluster.capacity)]


def two_variables():
    """Two variables of 150 bytes, each read by its own op, and a 0-byte op joining them:
    the variables fit only apart, on devices 0 and 2 of [191, 1, 191]."""
    return CostGraph.build(names=["va", "vb", "ra", "rb", "join"], comp_us=[0, 0, 2, 3, 1],
                           out_bytes=[0, 0, 0, 0, 0], persist_bytes=[150, 150, 0, 0, 0],
                           group=["a", "b", "a", "b", "join"],
                           edge_src=["va", "vb", "ra", "rb"], edge_dst=["ra", "rb", "join", "join"],
                           edge_bytes=[0, 0, 0, 0])


@pytest.mark.parametrize("capacities", [[191, 1, 191], [1, 191, 191], [191, 191, 1]])
def test_the_complete_search_finds_the_fit_on_unequal_devices(capacities):
    graph, cluster = two_variables(), unequal(capacities)
    fitting = brute_force(graph, cluster)
    assert fitting                              # the known answer: the variables on the two large devices
    allowed = allowed_devices(graph, cluster)
    for start in itertools.product(range(3), repeat=graph.num_groups):
        found = exhaustive.search(graph, cluster, np.array(start), allowed, peaks_of(graph, cluster))
        assert found.group_device is not None, f"start {start}: declared that nothing fits"
        assert tuple(found.group_device.tolist()) in fitting
    r = judge(graph, cluster, np.zeros(graph.num_nodes, np.int32))
    assert np.all(r.profile.peak_bytes <= cluster.capacity)
    _, report = placer.place(graph, cluster, "pardnn")
    assert report.feasible and np.all(np.array(report.peak_memory_bytes) <= cluster.capacity)


def test_the_complete_search_finds_the_fit_behind_a_slow_link():
    """Equal capacities, one slow link: the devices are not interchangeable either, and
    where a tensor arrives late its copy is held longer. The search must agree with brute
    force whatever the start."""
    for seed in range(12):
        rng = np.random.default_rng([7, seed])
        graph, _ = random_case(rng)
        if 3 ** graph.num_groups > 800:
            continue
        c = unequal([1, 1, 1])
        lat = c.latency_us.copy()
        lat[0, 2] = lat[2, 0] = 50.0
        peaks = [peaks_of(graph, replace(c, latency_us=lat))(np.asarray(p, np.int64)[graph.group]).max()
                 for p in itertools.product(range(3), repeat=graph.num_groups)]
        c = replace(c, latency_us=lat, devices=tuple(replace(d, memory=int(min(peaks))) for d in c.devices))
        fitting = brute_force(graph, c)
        found = exhaustive.search(graph, c, np.zeros(graph.num_groups, np.int64),
                                  allowed_devices(graph, c), peaks_of(graph, c))
        assert found.group_device is not None and tuple(found.group_device.tolist()) in fitting


@pytest.mark.parametrize("seed", range(16))
def test_the_complete_search_agrees_with_brute_force_on_unequal_capacities(seed):
    """Random small graphs, capacities drawn apart per device: the search fits exactly
    when some placement does, and when it proves none does, every placement overflows
    some device by at least the least overflow it reports."""
    rng = np.random.default_rng([45, seed])
    graph, k = random_case(rng)
    if k ** graph.num_groups > 1500:
        graph, k = random_case(rng)
    if k ** graph.num_groups > 1500:
        pytest.skip("brute force too large")
    total = int(graph.persist_bytes.sum() + graph.out_bytes.sum())
    cluster = unequal(rng.integers(total // 4, total + 1, k))
    fitting = brute_force(graph, cluster)
    peaks = peaks_of(graph, cluster)
    found = exhaustive.search(graph, cluster, rng.integers(0, k, graph.num_groups),
                              allowed_devices(graph, cluster), peaks)
    assert found.complete
    if fitting:
        assert found.group_device is not None and tuple(found.group_device.tolist()) in fitting
    else:
        assert found.group_device is None
        least = min(int((peaks(np.asarray(p, np.int64)[graph.group]) - cluster.capacity).max())
                    for p in itertools.product(range(k), repeat=graph.num_groups))
        assert 0 < found.least_overflow <= least

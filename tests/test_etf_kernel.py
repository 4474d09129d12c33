"""m-ETF's compiled loop against its readable twin: the same Python code run by the
interpreter (`_run.interpreted`), on random graphs with memory limits, ties and groups."""

import numpy as np
import pytest

from pardnn.graph import RESIDUAL, CostGraph
from pardnn.hardware import Cluster, Device
from pardnn.placers import etf

SEEDS = range(60)


def random_graph(rng):
    """A random DAG of 4-40 nodes: many zero and equal costs (ties), variables
    (resident state), colocation groups of several nodes, a few CPU pins."""
    n = int(rng.integers(4, 41))
    src, dst = [], []
    for v in range(1, n):
        for u in rng.choice(v, size=min(v, int(rng.integers(0, 4))), replace=False):
            src.append(int(u))
            dst.append(v)
    kind = np.where(rng.random(n) < 0.15, RESIDUAL, 0)
    group = np.arange(n)
    for v in np.flatnonzero(rng.random(n) < 0.3):
        group[v] = group[int(rng.integers(0, n))]
    pinned = ["CPU" if x < 0.05 else "" for x in rng.random(n)]
    return CostGraph.build(
        names=[f"n{i}" for i in range(n)], ops=rng.choice(["MatMul", "AddV2"], n).tolist(),
        comp_us=rng.choice([0.0, 1.0, 2.0, 5.0], n),
        out_bytes=rng.choice([0, 100, 100, 1000], n), persist_bytes=np.where(kind == RESIDUAL, 500, 0),
        kind=kind, group=group.tolist(), pinned=pinned, edge_src=src, edge_dst=dst,
        edge_bytes=rng.choice([0, 100, 1000], len(src)), edge_slot=np.where(rng.random(len(src)) < 0.2, -1, 0))


def cluster(rng, graph, limited):
    """2-4 GPUs and a CPU, links of random latency; memory a random share of the
    graph's bytes when `limited`, so that nodes wait for memory and some are forced.
    In half the cases the CPU is slower (devices of different speeds: ETF picks by finish)."""
    k = int(rng.integers(2, 5))
    total = int(graph.out_bytes.sum() + graph.persist_bytes.sum()) + 1
    memory = int(total * rng.uniform(0.05, 0.5)) if limited else 2**40
    compute, mem_rate = (0.1, 0.5) if rng.random() < 0.5 else (1.0, 1.0)
    devices = tuple(Device(f"/device:GPU:{i}", "GPU", memory) for i in range(k)) + \
        (Device("/device:CPU:0", "CPU", memory, compute_rate=compute, memory_rate=mem_rate),)
    lat = np.full((k + 1, k + 1), float(rng.choice([0.0, 1.0, 5.0])))
    bw = np.full((k + 1, k + 1), 100.0)
    np.fill_diagonal(lat, 0.0)
    np.fill_diagonal(bw, np.inf)
    return Cluster(devices, lat, bw, reserve=0.0)


@pytest.mark.parametrize("seed", SEEDS)
def test_compiled_m_etf_matches_the_interpreted_twin(seed):
    rng = np.random.default_rng(seed)
    g = random_graph(rng)
    c = cluster(rng, g, limited=seed % 4 != 0)
    compiled = etf._run.compiled(*etf.arrays(g, c))
    assert np.array_equal(compiled, etf._run.interpreted(*etf.arrays(g, c)))
    assert np.all(compiled >= 0)


def test_the_random_cases_reach_memory_limits_and_ties():
    limited = tied = 0
    for seed in SEEDS:
        rng = np.random.default_rng(seed)
        g = random_graph(rng)
        c = cluster(rng, g, limited=seed % 4 != 0)
        free = c.with_options(memory=2**40)
        limited += not np.array_equal(etf.place(g, c), etf.place(g, free))
        tied += bool(np.any(g.comp_us == 0)) and len(np.unique(g.comp_us)) < g.num_nodes
    assert limited >= 10 and tied >= 50

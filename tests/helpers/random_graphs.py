"""Small graphs for the emulator's tests: `cluster(k)` and hypothesis' `placed_graphs`,
random DAGs with a placement (tests/test_emulator_scheduler.py and
tests/test_emulator_memory.py)."""

import numpy as np
from hypothesis import strategies as st

from pardnn.graph import CostGraph
from pardnn.hardware import parse_devices


def cluster(k, latency=0.0, bandwidth=float("inf")):
    """k devices; bandwidth in bytes per us, latency in us."""
    return parse_devices(f"cpu:{k}").with_options(latency=latency, bandwidth=bandwidth)


@st.composite
def placed_graphs(draw):
    n = draw(st.integers(4, 14))
    pairs = [(u, v) for v in range(n) for u in range(v)]
    edges = draw(st.lists(st.sampled_from(pairs), unique=True, min_size=min(n, len(pairs)),
                          max_size=3 * n)) if pairs else []
    slots = draw(st.lists(st.integers(-1, 1), min_size=len(edges), max_size=len(edges)))
    comp = draw(st.lists(st.sampled_from([1.0, 2.5, 7.0, 0.0]), min_size=n, max_size=n))
    ebytes = draw(st.lists(st.sampled_from([0, 50, 300]), min_size=len(edges), max_size=len(edges)))
    k = draw(st.integers(0, 5).map(lambda x: 1 if x == 5 else 2 + x % 2))    # one device in 1/6
    device = draw(st.lists(st.integers(0, k - 1), min_size=n, max_size=n))
    out = draw(st.lists(st.sampled_from([0, 10, 40]), min_size=n, max_size=n))
    persist = draw(st.lists(st.sampled_from([0, 0, 100]), min_size=n, max_size=n))
    kind = draw(st.lists(st.sampled_from([0, 0, 0, 1, 2]), min_size=n, max_size=n))
    g = CostGraph.build(names=[f"n{i}" for i in range(n)], comp_us=comp, out_bytes=out,
                        persist_bytes=persist, kind=kind,
                        edge_src=[e[0] for e in edges], edge_dst=[e[1] for e in edges],
                        edge_slot=slots, edge_bytes=ebytes)
    return g, cluster(k, latency=2, bandwidth=100), np.asarray(device)


def small_dag(seed, n_max=14, groups=False):
    """A random DAG of 3 to n_max nodes whose costs are small whole numbers (many 0s and
    repeats, so events and priorities tie) and whose bytes are multiples of 4, so that
    on `exact_cluster` every time is a dyadic number and any order of adding gives the
    same double: a reference may add in its own order and still match to the bit."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(3, n_max + 1))
    pairs = sorted({(int(a), int(b)) for a, b in rng.integers(0, n, (int(rng.integers(n, 3 * n + 1)), 2))
                    if a < b})
    label = rng.integers(0, max(n // 2, 1), n) if groups else None
    g = CostGraph.build(names=[f"n{i}" for i in range(n)], comp_us=rng.choice([0, 1, 2, 5], n),
                        out_bytes=rng.choice([0, 4, 8, 16], n), persist_bytes=rng.choice([0, 0, 8], n),
                        group=label, edge_src=[a for a, _ in pairs], edge_dst=[b for _, b in pairs],
                        edge_bytes=rng.choice([0, 4, 8, 16], len(pairs)),
                        edge_slot=rng.choice([-1, 0, 0, 1], len(pairs)))
    return g, rng


def exact_cluster(k, memory=2**40, latency=2.0):
    """k devices, `latency` us and 4 bytes per us on every link (see `small_dag`)."""
    return parse_devices(f"cpu:{k}").with_options(memory=memory, reserve=0.0, latency=latency, bandwidth=4.0)

"""Cluster swapping (pardnn.placers.step1_phases.swapping): its loop decides as Eq. 4.2 costed
with the mapping's own FenwickTree and ClusterLinks would, to the bit."""


import numpy as np
import pytest

from pardnn.graph.constraints import allowed_devices
from pardnn.graph.edge_costs import mean_edge_costs
from pardnn.hardware import parse_devices
from pardnn.placers.step1_phases.mapping import map_clusters
from pardnn.placers.step1_phases.slicing import slice_graph
from pardnn.placers.step1_phases.cut_edges import ADD, ZERO, ClusterLinks, numpy_sum_plan
from pardnn.placers.step1_phases.fenwick import FenwickTree
from pardnn.placers.step1_phases.swapping import SCAN, _unbalanced, swap_clusters

from tools.synth_graph import synth_graph


def test_sum_plan_adds_in_numpys_order():
    rng = np.random.default_rng(0)
    for n in list(range(0, 140)) + [255, 256, 257, 300, 512, 700]:
        plan = numpy_sum_plan(n)
        assert sorted(i for i in plan.tolist() if i >= 0) == list(range(n))
        for _ in range(3):
            terms = rng.random(n) * 10.0 ** rng.integers(-6, 9, n)
            terms[rng.random(n) < 0.4] = 0.0
            stack = []
            for op in plan.tolist():
                if op == ADD:
                    top = stack.pop()
                    stack[-1] += top
                else:
                    stack.append(0.0 if op == ZERO else terms[op])
            assert stack == [np.add.reduce(terms)]


class Eq42:
    """Eq. 4.2 costed with the mapping's own numpy objects (the module docstring): the
    LALB clusters by start level, and the gain of swapping a cluster with a partner."""

    def __init__(self, graph, slices, mapping):
        self.graph, self.mapping = graph, mapping
        lalb = np.setdiff1d(np.arange(slices.num_primary, slices.num_clusters), mapping.merged)
        self.lalb = lalb
        self.by_start = lalb[np.argsort(mapping.level[slices.head[lalb]], kind="stable")]
        self.starts = np.sort(mapping.level[slices.head[lalb]])

    def _work_in(self, x, lo, hi):
        level, comp = self.mapping.level, self.graph.comp_us
        return sum(comp[n] for n in self.mapping.links.members[x] if lo <= level[n] < hi)

    def best(self, c, b, excluded=()):
        """(gain, partner) of the best swap of cluster c with a lighter cluster on device
        b starting within its span (at most SCAN), or None when it has no partner."""
        m = self.mapping
        links, work, span, a = m.links, m.work, m.span, m.links.cdev[c]
        lo, hi = np.searchsorted(self.starts, span[c])
        partners = [p for p in self.by_start[lo:min(hi, lo + SCAN)] if links.cdev[p] == b and p not in excluded
                    and m.weight[p] < m.weight[c] and m.allowed[p, a]]
        if not partners:
            return None
        load, comm = work.range_sum(*span[c]), links.comm_cost(c)
        gains = []
        for p in partners:
            load2, comm2 = work.range_sum(*span[p]), links.comm_cost(p)
            before = (load[a] - self._work_in(c, *span[c]) + comm[a]
                      + load2[b] - self._work_in(p, *span[p]) + comm2[b])
            after = (load[b] - self._work_in(p, *span[c]) + comm[b]
                     + load2[a] - self._work_in(c, *span[p]) + comm2[a])
            gains.append((before - after, -p))
        gain, p = max(gains)
        return gain, -p


def expected_first_swap(graph, slices, mapping):
    """The first candidate with a partner, and its best partner if the swap gains."""
    eq = Eq42(graph, slices, mapping)
    for c, b in zip(*_unbalanced(mapping, eq.lalb)):
        found = eq.best(c, b)
        if found is not None:
            return c, (found[1] if found[0] > 0.0 else None)
    return None, None


def mapped(seed, large):
    """(graph, slices, mapping, a function mapping it again) of seed's synthetic graph:
    `large` nodes on odd seeds, 600 on even ones, over three clusters in turn."""
    g = synth_graph(large if seed % 2 else 600, seed=seed, shape="chain" if seed % 3 == 2 else "dag")
    cluster = parse_devices(["gpu:4", "dgx1-v100:8", "2xdgx-h100:4"][seed % 3])
    allowed, cost = allowed_devices(g, cluster), mean_edge_costs(g, cluster)
    slices = slice_graph(g, cluster.num_devices, cost, allowed)

    def remap():
        return map_clusters(g, cluster, slices, cost, allowed)
    return g, slices, remap(), remap


@pytest.mark.parametrize("seed", range(6))
def test_first_decision_is_eq_4_2_with_the_mappings_own_costs(seed):
    g, slices, mapping, _ = mapped(seed, 3000)
    c, partner = expected_first_swap(g, slices, mapping)
    assert c is not None
    before = mapping.links.cdev.copy()
    swaps = swap_clusters(g, slices, mapping)
    after = mapping.links.cdev
    if partner is None:
        assert after[c] == before[c]
    else:
        assert swaps > 0 and after[c] == before[partner] and after[partner] == before[c]


def expected_swaps(graph, slices, mapping):
    """The whole swap loop of the module docstring, costed with the mapping's numpy
    objects (updated in place as it swaps): the number of swaps."""
    eq, links, work = Eq42(graph, slices, mapping), mapping.links, mapping.work
    level, comp = mapping.level, graph.comp_us
    swapped = set()
    for c, b in zip(*_unbalanced(mapping, eq.lalb)):
        found = None if c in swapped else eq.best(c, b, swapped)
        if found is None or found[0] <= 0.0:
            continue
        a, p = links.cdev[c], found[1]
        for x, old, new in ((c, a, b), (p, b, a)):
            nodes = links.members[x]
            work.add(level[nodes], old, -comp[nodes])
            work.add(level[nodes], new, comp[nodes])
            links.assign(x, new)
        swapped |= {c, p}
    return len(swapped) // 2


@pytest.mark.parametrize("seed", range(6))
def test_every_swap_is_eq_4_2_with_the_mappings_own_costs(seed):
    g, slices, mapping, remap = mapped(seed, 1500)
    reference = remap()                                              # its own copy to update
    want = expected_swaps(g, slices, reference)
    assert swap_clusters(g, slices, mapping) == want
    assert mapping.links.cdev.tolist() == reference.links.cdev.tolist()
    assert np.array_equal(mapping.work.tree, reference.work.tree)


def expected_lalb(graph, cluster, slices, mapping):
    """Mapping's LALB phase by its definition (Eq. 4.2 with numpy's FenwickTree and
    ClusterLinks): from the primaries and merged clusters, each other cluster,
    heaviest first, onto the allowed device least in span work plus communication;
    ties: the one it talks with most (mean link), then the lowest."""
    cid, first = slices.cluster, slices.num_primary
    fixed = np.zeros(slices.num_clusters, bool)
    fixed[:first] = True
    fixed[mapping.merged] = True
    cdev = np.where(fixed, mapping.links.cdev, -1)
    links = ClusterLinks(graph, cluster, slices, cdev)
    level, comp, k = mapping.level, graph.comp_us, cluster.num_devices
    values = np.zeros((k, int(level.max(initial=0)) + 1))
    done = cdev[cid] >= 0
    np.add.at(values, (cdev[cid][done], level[done]), comp[done])
    work = FenwickTree(values)
    rest = np.flatnonzero(~fixed)
    wc0, wc1 = links.arrays.with_cost
    for c in rest[np.argsort(-mapping.weight[rest], kind="stable")].tolist():
        counts = links.counts(c)
        cost = work.range_sum(*mapping.span[c])
        if counts is not None:
            cost = cost + links.comm_cost(c)
        cost[~mapping.allowed[c]] = np.inf
        ties = np.flatnonzero(cost == cost.min())
        d = ties[0]
        if len(ties) > 1 and counts is not None:
            talk = wc0 * (counts[0] + counts[2]) + wc1 * (counts[1] + counts[3])
            d = ties[np.argmax(talk[ties])]
        nodes = links.members[c]
        work.add(level[nodes], d, comp[nodes])
        links.assign(c, d)
    return links.cdev


@pytest.mark.parametrize("seed", range(6))
def test_lalb_mapping_is_eq_4_2_with_numpys_costs(seed):
    g = synth_graph(1500 if seed % 2 else 600, seed=seed, shape="chain" if seed % 3 == 2 else "dag")
    cluster = parse_devices(["gpu:4", "dgx1-v100:8", "2xdgx-h100:4"][seed % 3])
    allowed, cost = allowed_devices(g, cluster), mean_edge_costs(g, cluster)
    slices = slice_graph(g, cluster.num_devices, cost, allowed)
    mapping = map_clusters(g, cluster, slices, cost, allowed)
    assert expected_lalb(g, cluster, slices, mapping).tolist() == mapping.links.cdev.tolist()

"""pardnn.pipeline.capacity's small parts on hand-made numbers, fast enough to run
against each of its mutants (tools/mutation.py): the memory whose usable part holds a
capacity, the bisection's bracket, a cluster's first devices, and the refusal of one
device."""

import math

import numpy as np
import pytest

from pardnn.base.errors import UserError
from pardnn.hardware import parse_devices
from pardnn.pipeline import capacity as cap


@pytest.mark.parametrize("reserve", [0.0, 0.1, 0.25, 0.3, 1 / 3, 0.5])
def test_the_memory_is_the_least_whose_usable_part_holds_the_capacity(reserve):
    for capacity in [0, 1, 7, 9, 21, 100, 12_345, 10**9, 10**9 + 7]:
        m = cap._memory(capacity, reserve)
        assert math.floor(m * (1.0 - reserve)) >= capacity, (capacity, reserve, m)
        assert m == 0 or math.floor((m - 1) * (1.0 - reserve)) < capacity, (capacity, reserve, m)
    assert cap._memory(21, 0.3) == 30         # 21 / 0.7 is 30.000000000000004: rounded up to 31, then back


def test_the_bisection_of_small_memories_ends_at_the_least_that_fits():
    tried = []

    def fits(m):
        tried.append(m)
        return m >= 37
    assert cap._near(10) == 10 and cap._bisect(10, 90, fits) == 37     # a bracket of 1 byte below 100
    assert all(10 <= m < 90 for m in tried) and len(tried) == len(set(tried))
    tried.clear()       # near the top, within ENDGAME tolerances: the top less one byte (80), not the midpoint
    assert cap._bisect(10, 90, lambda m: tried.append(m) or m >= 80) == 80
    assert tried == [49, 69, 79, 84, 81, 80]


def test_the_first_devices_keep_their_hosts():
    two = parse_devices("2xcpu:2")
    assert len(cap.first_devices(two, 3).hosts) == 2 and cap.first_devices(two, 3).num_devices == 3
    assert len(cap.first_devices(two, 2).hosts) == 1
    assert cap.first_devices(two, 3).latency_us.shape == (3, 3)


def test_capacity_needs_two_devices_or_more():
    cap.check_devices(parse_devices("cpu:2"))
    with pytest.raises(UserError, match=r"^--devices: capacity compares device counts"):
        cap.check_devices(parse_devices("cpu:1"))


def chain_case():
    from tools.synth_graph import synth_graph
    g = synth_graph(150, seed=0, shape="chain")
    return g, parse_devices("cpu:4")


def test_a_check_at_or_below_complete_at_most_judges_every_candidate():
    g, cluster = chain_case()
    memory = int(cluster.memory.max())                   # everything fits there
    first_fit = cap.Feasibility(g, cluster, "pardnn")
    assert first_fit.checks == 0 and first_fit.fits(memory) and first_fit.checks == 1
    assert first_fit.judged is None and first_fit.last is not None           # the first that fits ends it
    complete = cap.Feasibility(g, cluster, "pardnn")
    complete.complete_at_most = memory
    assert complete.fits(memory) and complete.judged_memory == memory
    assert set(complete.judged.candidates) == set(complete.names)


def test_the_rank_of_a_candidate_in_a_first_fit_check():
    g, cluster = chain_case()
    f = cap.Feasibility(g, cluster, "pardnn")
    capacity = int(cluster.capacity[0])
    f.built["etf"] = cap._Built(None, None, np.array([capacity + 5, capacity - 100, capacity + 2, 0]))
    assert f._rank("etf", 10, cluster) == (True, False, False, 7)            # 5 + 2 over, the rest not counted
    assert f._rank("heft", 10, cluster) == (True, False, True, 0)            # not built
    f.failed["heft"], f.last = 50, "heft"
    assert f._rank("heft", 10, cluster) == (False, True, True, 0)            # fitted last; failed at more
    assert f._rank("heft", 50, cluster)[1] is False


def test_a_fresh_check_is_first_fit_at_any_memory():
    g, cluster = chain_case()
    f = cap.Feasibility(g, cluster, "pardnn")
    assert not f.fits(1) and f.judged is None                    # nothing fits in a byte
    assert f.built and all(not cap.registry.PLACERS[n].reads_memory for n in f.built)   # memory-blind ones, once
    assert set(f.failed) == set(f.names) and set(f.failed.values()) == {1}


def test_the_try_at_the_bound_uses_its_own_check():
    """After a stop within NEAR_BOUND, the bound itself is tried once, with `at_bound`
    when given: its True is the answer, its False leaves the near fit."""
    low, top = 1000, 3000
    tried, at = [], []

    def fits(m):
        tried.append(m)
        return m >= 1000
    assert cap._bisect(low, top, fits, lambda m: at.append(m) or True) == low and at == [low]
    assert low not in tried and max(tried) > cap._near(low)
    at.clear()
    best = cap._bisect(low, top, fits, lambda m: at.append(m) or False)
    assert at == [low] and low < best <= cap._near(low)


def test_a_check_without_the_search_fits_only_where_the_full_check_does():
    """Feasibility.fits_as_judged: every candidate judged, no local search, no orders;
    a True is a fit the full check (and so `pardnn place`) finds too."""
    from pardnn.repair.least_memory import least_memory
    g, cluster = chain_case()
    bound = least_memory(g, cluster.num_devices).bytes
    for share in (1.0, 1.01, 1.05, 1.2, 2.0):
        memory = int(share * bound)
        quick, full = cap.Feasibility(g, cluster, "pardnn"), cap.Feasibility(g, cluster, "pardnn")
        quick.complete_at_most = full.complete_at_most = memory
        answer = quick.fits_as_judged(memory)
        assert quick.checks == 1 and (not answer or full.fits(memory))
        if answer:
            assert quick.judged_memory == memory and set(quick.judged.candidates) == set(quick.names)

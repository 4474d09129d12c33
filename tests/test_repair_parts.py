"""The pieces of the overflow repair: the two-heap greedy min-knapsack, the devices'
timelines, and the per-group footprints read from an emulation."""

import numpy as np
import pytest
from hypothesis import strategies as st

from pardnn.hardware import parse_devices
from pardnn.repair.footprint import Footprints, GroupLinks
from pardnn.repair.knapsack import TwoHeaps
from pardnn.emulator.memory import track_memory
from pardnn.repair.rangemax import BLOCK, RangeMax
from pardnn.emulator.scheduler import simulate
from pardnn.graph import NORMAL, REFERENCE, RESIDUAL, CostGraph


def pops(heaps, overflow, pot):
    out = []
    while overflow > 0:
        j = heaps.pop(overflow)
        if j < 0:
            break
        out.append(j)
        overflow -= pot[j]
    return out


def test_one_candidate_that_covers_the_overflow_beats_cheaper_bytes():
    cost, pot = [1, 5, 3], [10, 100, 40]
    # cost per byte: b (0.05) < c (0.075) < a (0.1); candidates covering 35: c (3), b (5)
    assert pops(TwoHeaps(cost, pot), 35, pot) == [2]


def test_without_a_covering_candidate_the_cheapest_bytes_go_first():
    cost, pot = [1, 5, 3], [10, 100, 40]
    # 145: nothing covers it, so the best ratio b (100 B); 45 left: still nothing
    # covers it, so c (40 B); 5 left: a covers it
    assert pops(TwoHeaps(cost, pot), 145, pot) == [1, 2, 0]
    assert pops(TwoHeaps(cost, pot), 1000, pot) == [1, 2, 0]      # runs out: -1 ends it


def test_ties_go_to_the_lower_index():
    assert pops(TwoHeaps([2, 2, 2], [10, 10, 10]), 5, [10, 10, 10]) == [0]


def reference_pops(cost, pot, overflow):
    """The two heaps by brute force: each pop rescans every candidate left."""
    left, out = set(range(len(cost))), []
    while overflow > 0 and left:
        best = min(left, key=lambda j: (cost[j] / pot[j], j))
        covers = [j for j in left if pot[j] >= overflow]
        if covers:
            whole = min(covers, key=lambda j: (cost[j], j))
            if cost[whole] <= cost[best]:
                best = whole
        left.discard(best)
        out.append(best)
        overflow -= pot[best]
    return out


def test_two_heaps_match_a_rescan_per_pop(reached):
    """Reached when the knapsack pops at least two candidates (a choice after a choice)."""
    def check(case):
        pairs, overflow = case
        cost, pot = [c for c, _ in pairs], [p for _, p in pairs]
        got = pops(TwoHeaps(cost, pot), overflow, pot)
        assert got == reference_pops(cost, pot, overflow)
        return len(got) >= 2

    @st.composite
    def cases(draw):
        """Overflows up to a little past all the candidates free together; three in four
        past what any one candidate frees (so that one pop cannot cover it)."""
        pairs = draw(st.lists(st.tuples(st.integers(0, 9), st.integers(1, 60)), min_size=2, max_size=40))
        low = max(p for _, p in pairs) + 1 if draw(st.integers(0, 3)) else 1
        return pairs, draw(st.integers(low, sum(p for _, p in pairs) + 60))

    reached(cases(), check, 80)



def kernel_pops(run, cost, pot, overflow, movable):
    """The groups `cover` (compiled or interpreted) moves, in order, as it pops a
    knapsack of one-node groups j (move cost cost[j], potential pot[j]) off device 0 of
    two: the groups not `movable` are pinned there, so their pops move nothing."""
    from pardnn.repair.knapsack import orders
    from pardnn.repair.move import Needs, Neighbours, Round, Rows, Timelines
    c = len(cost)
    none, empty, cut = np.zeros(c + 1, np.int64), np.zeros(0, np.int64), np.zeros(0)
    tl = RangeMax(np.zeros((2, 1), np.int64), 2, 1)
    allowed = np.ones((c, 2), bool)
    allowed[:, 1] = movable
    taken, moves = np.zeros(c, bool), np.empty((c, 2), np.int64)
    cost, pot = np.asarray(cost, float), np.asarray(pot, np.int64)
    left, done = run(0, overflow, np.arange(c), pot, cost, *orders(cost, pot), taken, allowed, np.zeros(c, np.int64),
                     moves, Neighbours(none, empty, cut, np.zeros(c)), Timelines(tl.vals, tl.lazy, tl.bmax, 1, BLOCK, cut),
                     Needs(none, cut, cut, empty, empty, empty, cut), Rows(none, empty, empty, empty, empty.astype(bool),
                                                                           empty, empty),
                     Round(np.zeros(c, np.int64), np.zeros(2), np.array([10**9, 10**9]), np.zeros((2, 1), bool),
                           np.zeros(c, bool), np.arange(c + 1), np.arange(c), np.zeros(2, np.int64)))
    assert np.all(moves[:done, 1] == 1) and left == overflow - pot[moves[:done, 0]].sum()
    return moves[:done, 0].tolist(), np.flatnonzero(taken).tolist()


def test_the_repair_kernel_pops_as_the_two_heaps_do(reached):
    """pardnn.repair.move's `cover`, compiled and interpreted, pops the candidates
    TwoHeaps pops, and moves those it can (a pinned one covers nothing); reached when
    it moves at least two (a choice after a choice)."""
    from pardnn.repair.move import cover

    def check(case):
        pairs, overflow = case
        cost, pot, movable = ([p[i] for p in pairs] for i in range(3))
        heaps, popped, moved, left = TwoHeaps(cost, pot), [], [], overflow
        while left > 0:
            j = heaps.pop(left)
            if j < 0:
                break
            popped.append(j)
            if movable[j]:
                moved.append(j)
                left -= pot[j]
        for run in (cover.compiled, cover.interpreted):
            assert kernel_pops(run, cost, pot, overflow, movable) == (moved, sorted(popped))
        return len(moved) >= 2

    @st.composite
    def cases(draw):
        """As for the two heaps' test, one candidate in five pinned."""
        pairs = draw(st.lists(st.tuples(st.integers(0, 9), st.integers(1, 60), st.integers(0, 4).map(bool)),
                              min_size=2, max_size=40))
        low = max(p for _, p, _ in pairs) + 1 if draw(st.integers(0, 3)) else 1
        return pairs, draw(st.integers(low, sum(p for _, p, _ in pairs) + 60))

    reached(cases(), check, 80)

def test_rangemax_matches_a_plain_array(reached):
    """Each row's levels and the first position of its highest level, as a plain array
    gives them; reached when that position lies past the first block, so that the
    block maxima choose it. (The range edits are pardnn.repair.move's kernel's, tested
    in tests/test_compiled.py.)"""
    def check(case):
        n, rows, seed = case
        rng = np.random.default_rng(seed)
        ref = rng.integers(-50, 51, (rows, n)) * rng.integers(0, 3, (rows, 1))
        for d in range(rows):                   # two equal peaks: the first is the answer
            ref[d, rng.integers(0, n, 2)] = 101 + int(rng.integers(0, 2))
        tl = RangeMax(ref, rows, n)
        far = False
        for d in range(rows):
            i, top = tl.argmax(d)
            assert tl.levels(d).tolist() == ref[d].tolist()
            assert top == ref[d].max() and i == int(np.argmax(ref[d]))
            far |= i >= BLOCK
        return far

    top = 3 * BLOCK                           # small draws (hypothesis' favourites) give long rows
    reached(st.tuples(st.integers(0, top).map(lambda y: BLOCK + top - y), st.integers(2, 5),
                      st.integers(0, 2**32)), check, 60)


def fig43_two_devices():
    # thesis Fig. 4.3 sizes; A, C, D, E, F on device 0, B and G on device 1
    mem = {"A": 1, "B": 4, "C": 1, "D": 2, "E": 2, "F": 2, "G": 2}
    edges = [("A", "C"), ("C", "D"), ("D", "E"), ("C", "F"), ("D", "F"), ("E", "F"), ("B", "G"), ("F", "G")]
    g = CostGraph.build(names=list(mem), comp_us=[1] * 7, out_bytes=list(mem.values()),
                        edge_src=[a for a, _ in edges], edge_dst=[b for _, b in edges],
                        edge_bytes=[mem[a] for a, _ in edges])
    return g, np.array([0, 1, 0, 0, 0, 0, 1])


def freed_at(fp, grid, g, t):
    """Bytes group g's leaving frees at time t, as things stand."""
    rows = np.array(fp.rows(g), np.int64)
    i = np.searchsorted(grid, t)
    live = fp.active[rows] & (fp.i0[rows] <= i) & (i < fp.i1[rows])
    return int(fp.bytes[rows][live].sum())


def footprints(g, device, k=2):
    c = parse_devices(f"cpu:{k}").with_options(latency=0.0, bandwidth=float("inf"))
    s = simulate(g, c, device)
    prof = track_memory(g, c, device, s)
    grid = np.unique(prof.times)
    return Footprints(g, prof, k, grid), grid, s, prof


def test_footprint_frees_the_thesis_memory_potential():
    g, device = fig43_two_devices()
    fp, grid, s, prof = footprints(g, device)
    ids = {x: g.names.index(x) for x in "ACDEFG"}
    # device 0 runs A C D E F at 0..5; at t=4 F runs (own 2) and reads C, D, E last (1+2+2)
    f_start = s.start[ids["F"]]
    for name in "CDEF":
        assert freed_at(fp, grid, g.group[ids[name]], f_start) == prof.potential(ids[name], f_start)
    assert freed_at(fp, grid, g.group[ids["F"]], f_start) == 7


def test_moving_a_variable_frees_its_state_but_brings_back_a_copy_for_its_readers():
    # v (RESIDUAL 100) and its read r are one group; m reads r on the same device
    g = CostGraph.build(names=["v", "r", "m", "n"], comp_us=[0, 0, 5, 5], out_bytes=[0, 0, 10, 10],
                        persist_bytes=[100, 0, 0, 0], kind=[RESIDUAL, REFERENCE, NORMAL, NORMAL],
                        group=["w", "w", "m", "n"], edge_src=["v", "r", "m"], edge_dst=["r", "m", "n"],
                        edge_bytes=[100, 100, 10])
    fp, grid, _, _ = footprints(g, np.zeros(4, int))
    links = GroupLinks(g, parse_devices("cpu:2"))
    w = g.group[0]
    assert links.resident[w] == 100
    # while m runs (0..5) a copy of v's value (100 B) would have to be on device 0
    assert freed_at(fp, grid, w, 0.0) == -100
    assert freed_at(fp, grid, w, 5.0) == 0


def test_a_buffer_read_twice_is_freed_by_its_readers_in_turn():
    # p's 50 B output is read by a (runs 1..2) and by b (runs 2..3) on one device:
    # until a has run, moving b alone frees nothing of it; once a has left too,
    # b's row takes over the part before b's turn
    g = CostGraph.build(names=["p", "a", "b"], comp_us=[1, 1, 1], out_bytes=[50, 1, 1],
                        edge_src=["p", "p"], edge_dst=["a", "b"], edge_bytes=[50, 50])
    fp, grid, s, _ = footprints(g, np.zeros(3, int), k=1)
    assert s.start.tolist() == [0, 1, 2]
    a, b = g.group[1], g.group[2]
    assert freed_at(fp, grid, b, 1.0) == 0 and freed_at(fp, grid, b, 2.0) == 51   # + its own
    assert freed_at(fp, grid, a, 1.0) == 1          # only its own output while it runs
    (row_b,) = [r for r in fp.rows(b) if fp.bytes[r] == 50]
    (row_a,) = [r for r in fp.rows(a) if fp.bytes[r] == 50]
    assert fp.next[row_b] == row_a and not fp.active[row_a]
    fp.active[row_a] = True                         # b has left: a's part is next
    assert freed_at(fp, grid, a, 1.0) == 51


@pytest.mark.parametrize("seed", range(20))
def test_levels_on_the_grid_are_those_of_the_latest_event_at_or_before_each_point(seed):
    """repair_round._grid merges every device's event times; _on_grid's level for each
    device on each grid point is the one a search of the point among that device's
    events finds, including points before its first event and points of other devices."""
    from types import SimpleNamespace

    from pardnn.repair.repair_round import _grid, _on_grid
    rng = np.random.default_rng(seed)
    k = int(rng.integers(1, 5))
    per_device = [np.unique(rng.integers(0, 100, rng.integers(1, 40)).astype(float)) for _ in range(k)]
    levels = [rng.integers(0, 1000, len(t)) for t in per_device]
    ptr = np.concatenate([[0], np.cumsum([len(t) for t in per_device])])
    profile = SimpleNamespace(times=np.concatenate(per_device), levels=np.concatenate(levels), time_ptr=ptr)
    grid, at = _grid(profile.times)
    assert np.array_equal(grid, np.unique(profile.times)) and np.array_equal(grid[at], profile.times)
    for d in range(k):
        want = levels[d][np.maximum(np.searchsorted(per_device[d], grid, side="right") - 1, 0)]
        assert np.array_equal(_on_grid(profile, d, at, len(grid)), want)


def test_an_edge_crossing_groups_costs_the_mean_latency_plus_its_bytes_over_the_bandwidth():
    g = CostGraph.build(names=["a", "b", "z"], comp_us=[1, 1, 0], out_bytes=[10, 10, 0],
                        edge_src=["a", "b"], edge_dst=["b", "z"], edge_bytes=[400, 10])
    links = GroupLinks(g, parse_devices("cpu:2").with_options(latency=5.0, bandwidth=100.0))
    # each edge listed under both its groups: 5 us + 400 B / (100 B/us), 5 us + 10 B / (100 B/us)
    assert links.ecost.tolist() == [9.0, 5.1, 9.0, 5.1]
    assert GroupLinks(g, parse_devices("cpu:1")).ecost.tolist() == [0.0] * 4     # one device: no transfer


def test_a_node_that_computes_nothing_needs_no_working_set():
    from pardnn.repair.least_memory import group_resident, working_sets
    g = CostGraph.build(names=["a", "b", "z"], comp_us=[1, 1, 0], out_bytes=[10, 10, 0],
                        edge_src=["a", "b"], edge_dst=["b", "z"], edge_bytes=[400, 10])
    # b: its 10 B input (an edge cannot carry more than a's output) and its own 10 B
    assert working_sets(g, group_resident(g)).tolist() == [10, 20, 0]


def variable_read_by(device):
    """test_moving_a_variable...'s graph (v, r grouped; m reads r; m -> n) placed by `device`."""
    g = CostGraph.build(names=["v", "r", "m", "n"], comp_us=[0, 0, 5, 5], out_bytes=[0, 0, 10, 10],
                        persist_bytes=[100, 0, 0, 0], kind=[RESIDUAL, REFERENCE, NORMAL, NORMAL],
                        group=["w", "w", "m", "n"], edge_src=["v", "r", "m"], edge_dst=["r", "m", "n"],
                        edge_bytes=[100, 100, 10])
    return g, footprints(g, np.array(device))


def test_the_copy_a_leaving_variable_leaves_behind_is_one_row_ending_its_chain():
    g, (fp, grid, _, _) = variable_read_by([0, 0, 0, 0])
    (row,) = [r for r in fp.rows(g.group[0]) if fp.bytes[r] < 0]
    assert fp.bytes[row] == -100 and fp.active[row] and fp.next[row] == -1


def test_a_reader_on_another_device_needs_no_copy_when_the_variable_leaves():
    # m runs on device 1: it receives v's value as a transfer wherever v is, so moving
    # the variable's group off device 0 brings nothing back there
    g, (fp, grid, _, _) = variable_read_by([0, 0, 1, 1])
    assert [r for r in fp.rows(g.group[0]) if fp.bytes[r] < 0] == []
    assert freed_at(fp, grid, g.group[0], 0.0) == 0


def test_buffer_rows_on_chosen_devices_are_only_those_devices_rows():
    from pardnn.repair.chains import buffer_rows
    g = CostGraph.build(names=["a", "b", "c", "d"], comp_us=[1] * 4, out_bytes=[10, 1, 20, 1],
                        edge_src=["a", "c"], edge_dst=["b", "d"], edge_bytes=[10, 20])
    fp, grid, s, prof = footprints(g, np.array([0, 0, 1, 1]))
    every = buffer_rows(g, prof, 2)
    assert sorted(set(every[1].tolist())) == [0, 1]
    mine = buffer_rows(g, prof, 2, np.array([True, False]))
    assert len(mine[1]) and set(mine[1].tolist()) == {0}
    assert all(np.array_equal(x, y[every[1] == 0]) for x, y in zip(mine[:6], every[:6]))


def test_the_consumer_kernel_on_a_chain_has_a_block_per_edge():
    # every edge a data edge to its own producer's block: as many blocks as edges, the
    # most a kernel's arrays are sized for
    from pardnn.repair.chains import _consumer_blocks, _consumers_by_sort
    g = CostGraph.build(names=list("abc"), comp_us=[1] * 3, out_bytes=[1] * 3,
                        edge_src=["a", "b"], edge_dst=["b", "c"], edge_bytes=[1, 1])
    _, _, _, p = footprints(g, np.zeros(3, int), k=1)
    on = np.ones(1, bool)
    args = (*g.successor_arrays, np.asarray(g.edge_slot, np.int64), p.node_device,
            g.group.astype(np.int64), p.node_running[1], on, g.num_groups)
    got, expected = _consumer_blocks.interpreted(*args), _consumers_by_sort(g, p, 1, on)
    assert [x.tolist() for x in got] == [x.tolist() for x in expected]
    assert got[1].tolist() == [0, 1, 2]                 # two blocks of one consumer each


def one_node_search(memory, limit):
    """The complete search on one node of 1,000 B output, two like devices of `memory` B
    (device 1 is device 0 renamed: the search skips it)."""
    from pardnn.repair.exhaustive import search
    g = CostGraph.build(names=["a"], comp_us=[1], out_bytes=[1000], edge_src=[], edge_dst=[], edge_bytes=[])
    c = parse_devices("cpu:2").with_options(memory=memory, reserve=0.0)
    return search(g, c, [0], np.ones((1, 2), bool), lambda device: np.zeros(2, np.int64), limit)


def test_the_search_may_spend_exactly_its_work_limit():
    # placing the group costs 1; emulating the placement, nodes + edges + 1 = 2 more
    found = one_node_search(10_000, 3)
    assert found.group_device.tolist() == [0] and found.complete and found.emulated == 1
    short = one_node_search(10_000, 2)
    assert short.group_device is None and not short.complete and short.emulated == 0
    # no room: its working set overflows by 900 B, known by the bound alone at a cost of 1
    proof = one_node_search(100, 1)
    assert proof.group_device is None and proof.complete and proof.least_overflow == 900
    assert not one_node_search(100, 0).complete

"""The least-memory bound (pardnn.repair.least_memory, docs/bounds.md "Least memory")
never exceeds what a placement needs: on random graphs and placements the emulated
peaks are at least every bound (one-device bounds: the highest peak; all-devices
bounds: the sum of the peaks), on small graphs the least highest peak over every
placement is at least the bound, and no placer ever fits below it; the same on
clusters of devices of different memories, kinds and rates, with and without a host
tier that keeps its own memory. Hand-made graphs check what each bound proves."""

import io
import itertools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pardnn.emulator.memory import track_memory
from pardnn.emulator.scheduler import simulate
from pardnn.base.errors import UserError
from pardnn.graph import NORMAL, RESIDUAL, CostGraph
from pardnn.hardware import Cluster, Device, parse_devices
from pardnn.io.summary import print_summary
from pardnn.pipeline import place as placer
from pardnn.placers import registry
from pardnn.repair import least_memory as lm
from pardnn.repair.least_memory import Bound, LeastMemory, least_memory, least_memory_on, pigeonhole
from pardnn.graph.live_tensors import ancestor_bytes
from pardnn.repair.live_at_once import held_at_once
from pardnn.repair.working_sets import working_sets


def cluster(k, memory=2**40, latency=1.0, bandwidth=100.0):
    return parse_devices(f"cpu:{k}").with_options(memory=int(memory), reserve=0.0, latency=latency,
                                                  bandwidth=bandwidth)


def peaks(graph, c, device):
    device = np.asarray(device, np.int64)
    return track_memory(graph, c, device, simulate(graph, c, device)).peak_bytes


@st.composite
def graphs(draw, max_nodes=14):
    """Random DAGs with every memory feature the emulator models: kinds, resident and
    scratch bytes, colocation groups, multi-output producers whose tensors differ in
    size from edge to edge, tensors read twice, control edges, ops that take no time."""
    n = draw(st.integers(2, max_nodes))
    pairs = [(u, v) for v in range(n) for u in range(v)]
    edges = draw(st.lists(st.sampled_from(pairs), min_size=1, max_size=3 * n))
    m = len(edges)
    small = st.sampled_from([0, 8, 40, 200])
    g = CostGraph.build(
        names=[f"n{i}" for i in range(n)],
        comp_us=draw(st.lists(st.sampled_from([0.0, 1.0, 3.0, 10.0]), min_size=n, max_size=n)),
        out_bytes=draw(st.lists(small, min_size=n, max_size=n)),
        persist_bytes=draw(st.lists(st.sampled_from([0, 0, 16, 120]), min_size=n, max_size=n)),
        temp_bytes=draw(st.lists(st.sampled_from([0, 0, 30]), min_size=n, max_size=n)),
        kind=draw(st.lists(st.sampled_from([0, 0, 0, 1, 2]), min_size=n, max_size=n)),
        group=draw(st.lists(st.integers(0, n - 1), min_size=n, max_size=n)) if draw(st.booleans()) else None,
        edge_src=[u for u, _ in edges], edge_dst=[v for _, v in edges],
        edge_slot=draw(st.lists(st.integers(-1, 2), min_size=m, max_size=m)),
        edge_bytes=draw(st.lists(small, min_size=m, max_size=m)))
    return g


def check_placement(graph, k, device, latency=1.0, bandwidth=100.0):
    c = cluster(k, latency=latency, bandwidth=bandwidth)
    peak = peaks(graph, c, device)
    need = least_memory(graph, k)
    assert int(peak.max()) >= need.bytes
    for b in need.bounds:
        assert (int(peak.max()) if b.alone else int(peak.sum())) >= b.bytes, b


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graphs(), st.integers(1, 4), st.data())
def test_no_emulated_placement_holds_less_than_any_bound(graph, k, data):
    group_device = np.asarray(data.draw(st.lists(st.integers(0, k - 1), min_size=graph.num_groups,
                                                 max_size=graph.num_groups)))
    latency = data.draw(st.sampled_from([0.0, 1.0, 50.0]))
    check_placement(graph, k, group_device[graph.group], latency=latency)


def every_placement(graph, k):
    for rest in itertools.product(range(k), repeat=graph.num_groups - 1):
        yield np.asarray((0, *rest))[graph.group]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graphs(max_nodes=7), st.integers(2, 3))
def test_the_best_placement_of_small_graphs_needs_at_least_the_bound(graph, k):
    c = cluster(k)
    least = min(int(peaks(graph, c, d).max()) for d in every_placement(graph, k))
    assert least >= least_memory(graph, k).bytes


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graphs(max_nodes=10), st.integers(2, 3), st.sampled_from(registry.names()))
def test_no_placer_fits_below_the_bound(graph, k, algorithm):
    need = least_memory(graph, k).bytes
    for memory in (need, 2 * need + 64):
        try:
            _, report = placer.place(graph, cluster(k, memory), algorithm)
        except UserError:
            continue
        assert max(report.peak_memory_bytes) >= need


def chain_with_saved_activations():
    """A training step in miniature: forward f1 -> f2 -> loss, backward b2 -> b1, each
    backward op reading the activation its forward op saved."""
    names = ["f1", "f2", "loss", "b2", "b1"]
    edges = [("f1", "f2"), ("f2", "loss"), ("loss", "b2"), ("b2", "b1"), ("f1", "b1"), ("f2", "b2")]
    return CostGraph.build(names=names, comp_us=[1] * 5, out_bytes=[100, 100, 4, 100, 100],
                           edge_src=[u for u, _ in edges], edge_dst=[v for _, v in edges],
                           edge_bytes=[100, 100, 4, 100, 100, 100])


def test_the_activations_saved_for_the_backward_pass_are_held_at_once():
    g = chain_with_saved_activations()
    # at the start of b2: f1's output (read by b1), f2's (read by b2), loss's (read by
    # b2) are alive, and b2's own output: 304 bytes over the devices
    op, held = held_at_once(g)
    assert held == 304 and g.names[op] == "b2"
    assert ancestor_bytes(g, [g.index()["b2"]]).tolist() == [204]
    assert least_memory(g, 1).binding.name == "live at once" and least_memory(g, 1).bytes == 304
    need = least_memory(g, 2)           # b1 alone holds 300: f1's, b2's and its own output
    assert need.fields()["bounds"]["live at once"] == 152 and need.bytes == 300
    for device in itertools.product(range(2), repeat=5):
        assert peaks(g, cluster(2), device).sum() >= 304


def test_a_cut_may_finish_an_incomparable_op_early_or_late():
    # a -> big (a 1000-byte output read by join) and a -> x -> join: at x's start either
    # big has run (its 1000 bytes are alive) or not (a's 10 bytes are, for big): the
    # bound takes the cheaper, 10, plus x's own 10 and a's 10 read by x
    names = ["a", "big", "x", "join"]
    edges = [("a", "big"), ("a", "x"), ("big", "join"), ("x", "join")]
    g = CostGraph.build(names=names, comp_us=[1, 1, 1, 1], out_bytes=[10, 1000, 10, 10],
                        edge_src=[u for u, _ in edges], edge_dst=[v for _, v in edges],
                        edge_bytes=[10, 10, 1000, 10])
    from pardnn.repair.live_at_once import CutNetwork
    assert CutNetwork(g).cut(g.index()["x"]) == 10
    assert held_at_once(g) == (g.index()["join"], 1000 + 10 + 10)     # big's, x's, join's own
    assert least_memory(g, 1).bytes <= min(peaks(g, cluster(1), [0] * 4))


def test_an_op_working_set_counts_a_foreign_variable_once_as_the_smaller_of_state_and_copy():
    # w (a variable, 1000 bytes, group of its own) read by m, which also reads x
    g = CostGraph.build(names=["w", "x", "m"], comp_us=[0, 1, 1], out_bytes=[1000, 50, 20],
                        kind=[RESIDUAL, NORMAL, NORMAL], edge_src=["w", "x"], edge_dst=["m", "m"],
                        edge_bytes=[1000, 50])
    work = working_sets(g)
    assert work[g.index()["m"]] == 20 + 50 + 1000      # own output, x's, and w (here or as a copy)
    check_placement(g, 2, [0, 0, 1])
    check_placement(g, 2, [0, 1, 0])


def test_a_copy_is_sized_by_the_tensor_not_the_producers_whole_output():
    # p has two outputs, 8 bytes read by c over slot 0 and 400 bytes over slot 1 read by d:
    # c on another device receives only the 8 bytes, and the bound counts no more
    g = CostGraph.build(names=["p", "c", "d"], comp_us=[1, 1, 1], out_bytes=[408, 0, 0],
                        edge_src=["p", "p", "p"], edge_dst=["c", "c", "d"], edge_slot=[0, 0, 1],
                        edge_bytes=[8, 8, 400])
    assert working_sets(g)[g.index()["c"]] == 8
    for device in itertools.product(range(2), repeat=3):
        check_placement(g, 2, device)


def test_pigeonhole_packs_the_largest_groups_with_the_transient_of_one():
    # five groups of 12 on 4 devices: two share one, with the smaller of their transients
    res = np.array([12, 12, 12, 12, 12, 1])
    extra = np.array([4, 4, 4, 4, 2, 0])
    assert pigeonhole(res, extra, 4) == (12 + 12 + 4, 2, 5)
    assert pigeonhole(res, extra, 8) is None


def test_ruled_out_reads_unequal_capacities():
    g = chain_with_saved_activations()
    need = least_memory(g, 2)
    assert need.ruled_out([300, 4]) is None
    assert need.ruled_out([4, 300]) is None                         # the larger holds b1's 300
    assert need.ruled_out([300, 3]).name == "live at once"          # 303 in all, 304 needed
    assert need.ruled_out([299, 100]).name == "largest op working set"
    assert need.fields()["bytes"] == 300


@pytest.mark.parametrize("k", [1, 2, 3])
def test_the_least_memory_of_every_placement_of_the_chain(k):
    g = chain_with_saved_activations()
    best = min(int(peaks(g, cluster(k), d).max()) for d in every_placement(g, k))
    assert least_memory(g, k).bytes <= best


def test_the_exhaustive_packing_tries_every_assignment_of_the_groups():
    from pardnn.repair.least_memory import packed_exactly
    # three groups of 10 with transients 5, 5, 1 on two devices: two share one, and
    # every pair has a transient of 5: 10 + 10 + 5 = 25; on three devices 10 + 5 each
    assert packed_exactly(np.array([10, 10, 10]), np.array([5, 5, 1]), 2) == (25, 3)
    assert packed_exactly(np.array([10, 10, 10]), np.array([5, 5, 1]), 3) == (15, 3)
    # 30 groups, then 15, need more than 50 partial packings; the 7 largest: 10 + 10 + 1
    assert packed_exactly(np.array([10] * 30), np.array([1] * 30), 4, limit=50) == (21, 7)
    for seed in range(20):
        rng = np.random.default_rng(seed)
        res, extra, k = rng.integers(0, 50, 6), rng.integers(0, 30, 6), int(rng.integers(2, 4))
        best = min(max(res[[g for g in range(6) if a[g] == d]].sum()
                       + max([extra[g] for g in range(6) if a[g] == d], default=0) for d in range(k))
                   for a in itertools.product(range(k), repeat=6))
        assert packed_exactly(res, extra, k)[0] == best


def test_the_exhaustive_packing_packs_the_largest_groups_of_many():
    from pardnn.repair.least_memory import PACKING_MAX_GROUPS, packed_exactly
    # three groups of 100 (transient 10) among 70 of 1: whatever the small ones do,
    # two of the three share a device: 200 + 10. The 64 largest are packed.
    res = np.array([1] * 67 + [100] * 3)
    extra = np.array([0] * 67 + [10] * 3)
    assert PACKING_MAX_GROUPS == 64
    assert packed_exactly(res, extra, 2) == (210, 64)


@pytest.mark.parametrize("seed", range(12))
def test_a_packing_of_fewer_groups_stays_below_the_best_packing_of_all(seed, monkeypatch):
    import pardnn.repair.least_memory as lm
    rng = np.random.default_rng(seed)
    res, extra, k = rng.integers(0, 50, 7), rng.integers(0, 30, 7), int(rng.integers(2, 4))

    def best(groups):
        return min(max(res[[g for g, on in zip(groups, a) if on == d]].sum()
                       + max([extra[g] for g, on in zip(groups, a) if on == d], default=0) for d in range(k))
                   for a in itertools.product(range(k), repeat=len(groups)))
    monkeypatch.setattr(lm, "PACKING_MAX_GROUPS", 5)
    found, count = lm.packed_exactly(res, extra, k)
    top = sorted(range(7), key=lambda g: (-(res[g] + extra[g]), g))[:count]
    assert count == 5 and found == best(top) <= best(list(range(7)))
    few = lm.packed_exactly(res, extra, k, limit=3)        # the search stops: fewer groups
    assert few is None or few[0] <= found


# ------------------------------------------- devices of different memories, kinds and rates
@st.composite
def mixed_clusters(draw, k):
    """K devices of random kinds (the first a GPU), rates above and below the
    profile's, memories of their own and random links; half the time the last is a
    host tier (the host's CPU, which keeps its own memory under --memory)."""
    host = draw(st.booleans()) and k > 1
    devices = []
    for d in range(k):
        tier = host and d == k - 1
        kind = "CPU" if tier else ("GPU" if d == 0 else draw(st.sampled_from(["GPU", "CPU"])))
        devices.append(Device(f"/job:localhost/replica:0/task:0/device:{kind}:{d}", kind,
                              draw(st.sampled_from([200, 600, 2**40])),
                              compute_rate=draw(st.sampled_from([0.25, 1.0, 2.0])),
                              memory_rate=draw(st.sampled_from([0.5, 1.0, 3.0])), host_tier=tier))
    latency = np.full((k, k), float(draw(st.sampled_from([0.0, 1.0, 50.0]))))
    bandwidth = np.full((k, k), float(draw(st.sampled_from([10.0, 100.0]))))
    np.fill_diagonal(latency, 0.0)
    np.fill_diagonal(bandwidth, np.inf)
    return Cluster(tuple(devices), latency, bandwidth, reserve=0.0)


def host_tier(c):
    return np.array([d.host_tier for d in c.devices])


def with_host_memory(c, memory):
    return c.with_options(host_memory=int(memory)) if host_tier(c).any() else c


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graphs(), st.integers(1, 4).flatmap(mixed_clusters), st.data())
def test_no_placement_on_a_mixed_cluster_holds_less_than_the_bounds(graph, c, data):
    """Whatever the devices' rates (they change the schedule, not what it holds): every
    bound holds, no placement's peaks as capacities are ruled out, and the devices
    beside a host tier as large as the host's peak peak at least the least memory."""
    k = c.num_devices
    group_device = np.asarray(data.draw(st.lists(st.integers(0, k - 1), min_size=graph.num_groups,
                                                 max_size=graph.num_groups)))
    peak = peaks(graph, c, group_device[graph.group])
    need = least_memory(graph, k)
    for b in need.bounds:
        assert (int(peak.max()) if b.alone else int(peak.sum())) >= b.bytes, b
    assert need.ruled_out(peak) is None
    host = host_tier(c)
    if host.any():      # the placement fits the host at its peak and the others at their largest
        on = least_memory_on(graph, with_host_memory(c, peak[host].max()))
        assert on.host_tier and int(peak[~host].max()) >= on.bytes


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graphs(max_nodes=10), st.integers(2, 3).flatmap(mixed_clusters),
       st.sampled_from(registry.names()), st.sampled_from([0.0, 0.3, 0.6, 2.0]))
def test_no_placer_fits_below_the_bound_on_a_mixed_cluster(graph, c, algorithm, host_share):
    """Every placer, on devices of different memories, kinds and rates: a placement that
    fits (the host within its own memory) has a device beside the host holding at least
    the least memory per device, so at one byte less than that none fits."""
    total = int(peaks(graph, c, np.zeros(graph.num_nodes, np.int64)).max())
    c = with_host_memory(c, host_share * total)
    need = least_memory_on(graph, c).bytes
    host = host_tier(c)
    for memory in sorted({max(need - 1, 0), need, 2 * need + 64}):
        at = c.with_options(memory=memory)
        try:
            _, report = placer.place(graph, at, algorithm)
        except UserError:
            continue
        if not report.feasible:
            continue
        held = np.asarray(report.peak_memory_bytes)
        assert np.all(held <= at.capacity)
        assert int(held[~host].max()) >= need


def small_mlp_step():
    """A training step in miniature: three variables of 3,000 bytes (weights and
    slots, updated in place), 40-byte activations."""
    names = ["w0", "w1", "w2", "x", "f0", "f1", "f2", "loss", "b2", "b1", "b0", "u0", "u1", "u2"]
    at = {x: i for i, x in enumerate(names)}
    out = [0, 0, 0, 40, 40, 40, 40, 8, 40, 40, 40, 0, 0, 0]
    edges = [("x", "f0"), ("w0", "f0"), ("f0", "f1"), ("w1", "f1"), ("f1", "f2"), ("w2", "f2"),
             ("f2", "loss"), ("loss", "b2"), ("f1", "b2"), ("b2", "b1"), ("f0", "b1"), ("b1", "b0"),
             ("x", "b0"), ("b0", "u0"), ("w0", "u0"), ("b1", "u1"), ("w1", "u1"), ("b2", "u2"), ("w2", "u2")]
    return CostGraph.build(names=names, comp_us=[1.0] * len(names), out_bytes=out,
                           persist_bytes=[3000] * 3 + [0] * 11, kind=[RESIDUAL] * 3 + [NORMAL] * 11,
                           group=[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 0, 1, 2],
                           edge_src=[at[u] for u, _ in edges], edge_dst=[at[v] for _, v in edges],
                           edge_bytes=[out[at[u]] or 8 for u, _ in edges])


def gpu_and_host(gpu, host):
    return parse_devices("gpu:1+host").with_options(memory=gpu, host_memory=host, reserve=0.0)


def test_the_host_takes_the_state_off_a_small_gpu():
    """Issue 52 item 5: on gpu:1+host the GPU fits in far less than two equal devices
    would need (groups packed: two of the three variables on one device, 6,040 B),
    since the host takes the variables; report.json's least memory must not claim more."""
    g = small_mlp_step()
    assert least_memory(g, 2).bytes == 6040
    _, report = placer.place(g, gpu_and_host(1000, 10**9), "pardnn")
    gpu_peak = report.peak_memory_bytes[0]
    assert report.feasible and gpu_peak < 1000
    assert report.least_memory["bytes"] <= gpu_peak
    assert report.least_memory["host_bytes"] == 10**9
    printed = io.StringIO()
    print_summary(report.to_json(), file=printed)
    assert "least memory: 0 B per device usable beside the host's 953.67 MiB, for any placement" in printed.getvalue()


@pytest.mark.parametrize("host, least, binding", [
    (10**9, 0, "largest colocation group"),     # the host holds what every bound asks
    (7000, 2168, "live at once"),               # 9,168 B at once, 7,000 of them on the host
    (5000, 6040, "groups packed"),              # the host holds one variable, the GPU two
])
def test_the_least_memory_beside_the_host_is_what_the_host_does_not_hold(host, least, binding):
    g = small_mlp_step()
    need = least_memory_on(g, gpu_and_host(10**6, host))
    assert (need.bytes, need.binding.name) == (least, binding)
    assert need.ruled_out([least, host]) is None
    if least:
        assert need.ruled_out([least - 1, host]) is not None
        assert need.shortfall([least - 1, host]).startswith("at least ") and "beside the host's" in need.describe()
        for algorithm in registry.names():      # one byte less on the GPU: nothing fits
            with pytest.raises(UserError):
                placer.place(g, gpu_and_host(least - 1, host), algorithm)


# The parts on hand-made numbers (the bounds' arithmetic, the packings against brute force)


def independent(persist):
    """Nodes without edges, each its own group holding `persist` bytes."""
    n = len(persist)
    return CostGraph.build(names=[f"n{i}" for i in range(n)], comp_us=[1] * n, out_bytes=[0] * n,
                           persist_bytes=persist, edge_src=[], edge_dst=[])


def test_the_bounds_of_an_empty_graph_and_of_a_graph_holding_nothing():
    empty = CostGraph.build(names=[], comp_us=[], out_bytes=[], edge_src=[], edge_dst=[])
    assert least_memory(empty, 2).fields() is None and least_memory(empty, 2).bytes == 0
    assert LeastMemory(2, ()).bytes == 0
    nothing = CostGraph.build(names=["a", "b"], comp_us=[1, 1], out_bytes=[0, 0], edge_src=["a"], edge_dst=["b"])
    assert "largest op working set" not in {b.name for b in least_memory(nothing, 2).bounds}


def test_the_groups_packed_bound_is_the_exact_packing_where_it_is_larger():
    # 7 + 4 x 2 on 2 devices: the best packing holds 8 on one ({7}, {2, 2, 2, 2}... {7, 2} is 9);
    # the pigeonhole bound is 6 (3 of the 5 largest); 5 + 5 + 5: both 10, the pigeonhole's named
    bounds = {b.name: b for b in least_memory(independent([7, 2, 2, 2, 2]), 2).bounds}
    packed = bounds["groups packed"]
    assert (bounds["live at once"].bytes, bounds["live at once"].what) == (15, "at the start of op 'n0'")  # op 0
    assert packed.bytes == 8 and packed.what.startswith("the best packing of the 5 colocation groups")
    assert lm.pigeonhole(np.array([7, 2, 2, 2, 2]), np.zeros(5, np.int64), 2) == (6, 3, 5)
    tie = {b.name: b for b in least_memory(independent([5, 5, 5]), 2).bounds}["groups packed"]
    assert (tie.bytes, tie.what) == (10, "2 of the 3 largest colocation groups on one device")


def test_pigeonhole_takes_j_k_plus_1_groups_within_its_work_and_the_first_best(monkeypatch):
    zeros = np.zeros(6, np.int64)
    assert lm.pigeonhole(np.array([4, 3, 2]), zeros[:3], 2) == (5, 2, 3)          # all 3 = j k + 1, j = 1
    assert lm.pigeonhole(np.array([5, 0, 0]), zeros[:3], 1) == (5, 2, 2)          # j = 2 ties: the first kept
    res = np.array([6, 5, 4, 3, 2, 1])
    monkeypatch.setattr(lm, "PIGEONHOLE_WORK", 9)        # k = 1: (j + 1) j work: j = 1, 2 (6), not 3 (12)
    assert lm.pigeonhole(res, zeros, 1) == (15, 3, 3)
    monkeypatch.setattr(lm, "PIGEONHOLE_WORK", 12)
    assert lm.pigeonhole(res, zeros, 1) == (18, 4, 4)


def brute_least_set(res, extra, size):
    return min(sum(res[i] for i in s) + max(extra[i] for i in s)
               for s in itertools.combinations(range(len(res)), size))


def brute_packing(res, extra, k):
    best = None
    for assign in itertools.product(range(k), repeat=len(res)):
        need = max((sum(r for r, d in zip(res, assign) if d == x) +
                    max([e for e, d in zip(extra, assign) if d == x], default=0)) for x in range(k))
        best = need if best is None else min(best, need)
    return best


@pytest.mark.parametrize("seed", range(6))
def test_the_least_set_and_the_packing_are_those_of_brute_force(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(3, 7))
    res, extra = rng.choice([0, 1, 2, 5, 9], n), rng.choice([0, 0, 1, 3, 8], n)
    for size in range(1, n + 1):
        assert lm._least_set(res, extra, size) == brute_least_set(res.tolist(), extra.tolist(), size)
    for k in (2, 3):
        some = [(int(r), int(e)) for r, e in zip(res, extra) if r or e]
        found = lm.packed_exactly(res, extra, k)
        if len(some) == 0:
            assert found is None
        else:
            assert found == (brute_packing([r for r, _ in some], [e for _, e in some], k), len(some))


def test_the_least_set_keeps_the_smallest_state_as_it_goes():
    # in increasing extra, each item's state smaller than all before it, so the heap of
    # the two smallest so far changes at every step; the best set is the last three:
    # 3 + 2 + 1 and the extra 8
    assert lm._least_set(np.array([9, 8, 7, 6, 5, 4, 3, 2, 1]), np.arange(9), 3) == 14


def test_a_group_of_transients_alone_is_packed():
    assert lm.packed_exactly(np.array([3, 3, 0]), np.array([0, 0, 1]), 2) == (4, 3)
    assert lm._greedy_packing([(5, 0), (5, 0), (1, 0)], 2) == 6


def test_what_the_bounds_ask_of_each_device_beside_the_host():
    alone, together = Bound("one", 10, True, "it"), Bound("all", 40, False, "them")
    host = LeastMemory(3, (together,), host_tier=((2, 100),))
    assert host.per_device(together) == 0 and host.bytes == 0           # the host holds it all
    assert host.describe() == "0 B per device beside the host's 100 B, which holds what every bound asks"
    small = LeastMemory(3, (together,), host_tier=((2, 10),))           # 30 B over the 2 other devices
    assert small.per_device(together) == 15
    assert small.describe() == "15 B per device beside the host's 10 B (all, 40 B over 2 devices and the host: them)"
    assert LeastMemory(2, (alone,), host_tier=((1, 4),)).per_device(alone) == 10


def test_ruled_out_names_the_bound_that_asks_most_per_device():
    alone, together = Bound("one", 10, True, "it"), Bound("all", 40, False, "them")
    need = LeastMemory(2, (alone, together))
    assert need.ruled_out([5]) is together                  # one device: both, and 40 over 2 asks 20 > 10
    assert need.ruled_out([5, 5]) is together               # both rule out: 40 over 2 asks 20 per device
    assert need.ruled_out([]) is None and need.ruled_out([20, 20]) is None

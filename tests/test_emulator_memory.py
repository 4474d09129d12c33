"""Memory over time (thesis Eq. 4.3) and memory potentials on hand-worked examples,
plus the vectorised timelines against a direct evaluation of the definitions."""

import numpy as np

from pardnn.emulator.memory import track_memory
from pardnn.emulator.scheduler import Schedule, simulate
from pardnn.graph import NORMAL, REFERENCE, RESIDUAL, CostGraph
from pardnn.hardware import parse_devices

from helpers.random_graphs import cluster, placed_graphs

# A graph in the spirit of thesis Fig. 4.3: output sizes A1 B4 C1 D2 E2 F2 G2.
FIG43_MEM = {"A": 1, "B": 4, "C": 1, "D": 2, "E": 2, "F": 2, "G": 2}
FIG43_EDGES = [("A", "C"), ("C", "D"), ("D", "E"), ("C", "F"), ("D", "F"), ("E", "F"),
               ("B", "G"), ("F", "G")]


def fig43():
    return CostGraph.build(names=list(FIG43_MEM), comp_us=[1] * 7, out_bytes=list(FIG43_MEM.values()),
                           edge_src=[a for a, _ in FIG43_EDGES], edge_dst=[b for _, b in FIG43_EDGES],
                           edge_bytes=[FIG43_MEM[a] for a, _ in FIG43_EDGES])


def sequential(g, order):
    """A one-device schedule running `order` back to back, one time unit each."""
    start = np.empty(g.num_nodes)
    start[[g.names.index(x) for x in order]] = np.arange(len(order))
    none_i, none_f = np.zeros(0, np.int64), np.zeros(0)
    return Schedule(start=start, finish=start + 1, busy_us=np.array([g.num_nodes], float),
                    edge_transfer=np.full(g.num_edges, -1), transfer_edge=none_i,
                    transfer_dst=none_i.astype(np.int32), transfer_bytes=none_i,
                    transfer_send=none_f, transfer_arrival=none_f)


def test_fig43_schedule_a_c_d_e_f_b_g_peaks_at_g_with_8():
    g = fig43()
    m = track_memory(g, cluster(1), np.zeros(7, int), sequential(g, "ACDEFBG"))
    times, levels = m.timeline(0)
    assert times.tolist() == [0, 1, 2, 3, 4, 5, 6, 7]
    assert levels.tolist() == [1, 2, 3, 5, 7, 6, 8, 0]
    assert m.peak_bytes.tolist() == [8] and m.peak_time_us.tolist() == [6]   # B + F + G


def test_fig43_schedule_a_b_c_d_e_f_g_peaks_at_f_with_11():
    g = fig43()
    m = track_memory(g, cluster(1), np.zeros(7, int), sequential(g, "ABCDEFG"))
    assert m.timeline(0)[1].tolist() == [1, 5, 6, 7, 9, 11, 8, 0]
    assert m.peak_bytes.tolist() == [11] and m.peak_time_us.tolist() == [5]  # B, C, D, E, F
    assert m.level_at(0, 5.5) == 11 and m.level_at(0, 6) == 8


def test_emulated_one_device_schedule_is_fifo_a_b_c_d_e_f_g():
    g = fig43()
    s = simulate(g, cluster(1), np.zeros(7, int))
    assert [g.names[i] for i in np.argsort(s.start)] == list("ABCDEFG")
    assert track_memory(g, cluster(1), np.zeros(7, int), s).peak_bytes.tolist() == [11]


def test_memory_potentials_at_the_fig43_peak():
    g = fig43()
    m = track_memory(g, cluster(1), np.zeros(7, int), sequential(g, "ABCDEFG"))
    ids = {x: g.names.index(x) for x in FIG43_MEM}
    # at t=5, F runs (own 2) and is the last consumer of C, D, E (1+2+2);
    # G has not started but is the last consumer of B (4).
    nodes, pot = m.potentials(0, 5)
    assert dict(zip(nodes.tolist(), pot.tolist())) == {ids["F"]: 7, ids["G"]: 4}
    assert m.potential(ids["F"], 5) == 7 and m.potential(ids["B"], 5) == 0
    # at t=2 C runs (own 1) and is A's last consumer (1); C's output, still being
    # written, counts for C only, not yet for F, its last consumer
    assert m.potential(ids["C"], 2) == 2 and m.potential(ids["F"], 2) == 0
    assert m.potential(ids["F"], 3) == 1 and m.potential(ids["D"], 3) == 2


def test_received_copies_residual_and_reference_memory():
    # var (RESIDUAL, 1000 persistent) -> read (REFERENCE) -> mm on device 1,
    # p -> mm and p -> q on device 0. Link: 0 latency, 100 B/us.
    g = CostGraph.build(
        names=["var", "read", "p", "q", "mm"], comp_us=[0, 0, 2, 3, 1],
        out_bytes=[0, 0, 200, 10, 30], persist_bytes=[1000, 0, 0, 0, 0],
        kind=[RESIDUAL, REFERENCE, NORMAL, NORMAL, NORMAL],
        edge_src=["var", "read", "p", "p"], edge_dst=["read", "mm", "mm", "q"],
        edge_bytes=[1000, 1000, 200, 200])
    device = np.array([0, 0, 0, 0, 1])
    s = simulate(g, cluster(2, bandwidth=100), device)
    # device 0: var, read 0..0; p 0..2; q 2..5. read's 1000 B land on device 1 at 10,
    # p's 200 B queue behind them on the link: 10..12. mm runs 12..13.
    assert s.transfer_arrival.tolist() == [10, 12] and s.start[4] == 12
    m = track_memory(g, cluster(2, bandwidth=100), device, s)
    assert m.resident_bytes.tolist() == [1000, 0]
    # p's output lives 0..12 (until its copy landed), q's 2..5
    assert m.timeline(0)[0].tolist() == [0, 2, 5, 12]
    assert m.timeline(0)[1].tolist() == [1200, 1210, 1200, 1000]
    # copies: read's 10..13, p's 12..13, mm's output 12..13
    assert m.timeline(1)[0].tolist() == [0, 10, 12, 13]
    assert m.timeline(1)[1].tolist() == [0, 1000, 1230, 0]
    assert m.peak_bytes.tolist() == [1210, 1230] and m.peak_time_us.tolist() == [2, 12]
    assert m.potential(4, 12.5) == 1230


def level_by_definition(g, device, s, d, t):
    """Bytes in use on device d at time t, straight from the module docstring's rules."""
    total = 0
    for n in range(g.num_nodes):
        if device[n] != d:
            continue
        if g.kind[n] != REFERENCE:
            total += g.persist_bytes[n]
        if g.kind[n] == RESIDUAL:
            total += g.out_bytes[n]
        if g.kind[n] == NORMAL:
            free = s.finish[n]
            for e in range(g.succ_ptr[n], g.succ_ptr[n + 1]):
                if g.edge_slot[e] < 0:
                    continue
                x = s.edge_transfer[e]
                free = max(free, s.finish[g.edge_dst[e]] if x < 0 else s.transfer_arrival[x])
            total += g.out_bytes[n] if s.start[n] <= t < free else 0
    for x, e in enumerate(s.transfer_edge):
        if s.transfer_dst[x] != d or g.edge_slot[e] < 0:
            continue
        users = [g.edge_dst[f] for f in range(g.num_edges) if s.edge_transfer[f] == x]
        if s.transfer_arrival[x] <= t < max(s.finish[u] for u in users):
            total += s.transfer_bytes[x]
    return total


def test_timelines_match_the_definition_at_every_event(reached):
    """Reached when a received copy lives on some device (both kinds of transient
    buffer, outputs and copies, then meet the definition)."""
    def check(case):
        g, c, device = case
        s = simulate(g, c, device)
        m = track_memory(g, c, device, s)
        for d in range(c.num_devices):
            times, levels = m.timeline(d)
            assert np.all(np.diff(times) > 0)
            for t, level in zip(times, levels):
                assert level == level_by_definition(g, device, s, d, t)
                assert m.potentials(d, t)[1].sum() <= level - m.resident_bytes[d]   # nothing twice
            assert m.peak_bytes[d] == levels.max()
        copies = (m.buf_device != device[m.buf_node]) & (m.buf_bytes > 0)
        return bool(np.any(copies))

    reached(placed_graphs(), check, 100)


def test_scratch_memory_is_held_while_the_op_runs_and_counts_in_its_potential():
    # a (10 us) -> b (20 us, 500 B scratch) -> c (5 us); every output 100 B, one device
    g = CostGraph.build(["a", "b", "c"], comp_us=[10, 20, 5], out_bytes=[100, 100, 100],
                        temp_bytes=[0, 500, 0], edge_src=["a", "b"], edge_dst=["b", "c"],
                        edge_bytes=[100, 100])
    c1 = parse_devices("cpu:1")
    device = np.zeros(3, np.int32)
    profile = track_memory(g, c1, device, simulate(g, c1, device))
    assert profile.peak_bytes[0] == 100 + 100 + 500          # a's output, b's output, b's scratch
    assert profile.level_at(0, 15.0) == 700 and profile.level_at(0, 31.0) == 200
    assert profile.potential(g.index()["b"], 15.0) == 100 + 100 + 500
    without = CostGraph.from_dict({**g.to_dict(), "nodes": [{k: v for k, v in n.items() if k != "temp_bytes"}
                                                            for n in g.to_dict()["nodes"]]})
    assert without.temp_bytes.tolist() == [0, 0, 0]
    assert CostGraph.from_dict(g.to_dict()).temp_bytes.tolist() == [0, 500, 0]


def test_a_byte_of_scratch_counts_and_a_reference_adds_no_output_to_its_potential():
    """One byte of scratch is held while its op runs. A REFERENCE op (no output of its
    own) that is the last consumer of a's 10 bytes frees exactly those by moving: its
    potential while it runs is 10 plus its byte of scratch, not less."""
    g = CostGraph.build(["a", "r", "z"], comp_us=[2, 4, 1], out_bytes=[10, 0, 3], temp_bytes=[0, 1, 0],
                        kind=[NORMAL, REFERENCE, NORMAL], edge_src=["a", "r"], edge_dst=["r", "z"],
                        edge_bytes=[10, 0])
    c1 = parse_devices("cpu:1")
    device = np.zeros(3, np.int32)
    profile = track_memory(g, c1, device, simulate(g, c1, device))
    assert profile.timeline(0)[0].tolist() == [0, 2, 6, 7]
    assert profile.timeline(0)[1].tolist() == [10, 11, 3, 0]        # a's 10, r's scratch, z's 3
    assert profile.level_at(0, 0.0) == 10 and profile.level_at(0, 3.0) == 11
    assert profile.peak_bytes.tolist() == [11]
    ids = g.index()
    assert profile.potential(ids["r"], 3.0) == 11
    assert profile.potential(ids["z"], 3.0) == 0          # the highest id, with no potential


def test_the_buffer_kernel_keeps_a_one_byte_output_and_drops_an_empty_copy():
    """The kernel that large graphs use (`_buffer_columns`, run here as Python) on a
    graph small enough to know by hand: u's 1-byte output lives until v has read it on
    device 0; w's tensor of 0 bytes crosses to x on device 1 and holds nothing there."""
    from pardnn.emulator import memory
    g = CostGraph.build(names=["u", "v", "w", "x"], comp_us=[1, 1, 1, 1], out_bytes=[1, 0, 0, 0],
                        edge_src=["u", "w"], edge_dst=["v", "x"], edge_bytes=[1, 0])
    device = np.array([0, 0, 0, 1])
    s = simulate(g, parse_devices("cpu:2"), device)
    assert len(s.transfer_edge) == 1                # the empty tensor is still sent
    args = (g.kind == NORMAL, g.out_bytes.astype(np.int64), device, s.start, s.finish,
            memory.Edges(g.edge_src, g.edge_dst, g.edge_slot >= 0, s.edge_transfer),
            memory.Sent(s.transfer_edge, s.transfer_dst, s.transfer_bytes, s.transfer_arrival))
    got, expected = memory._buffer_columns.interpreted(*args), memory._buffers_by_numpy(g, device, s)
    assert [a.tolist() for a in got] == [a.tolist() for a in expected]
    dev, alloc, free, nbytes, node, owner, ready = got
    assert node.tolist() == [0] and nbytes.tolist() == [1] and owner.tolist() == [1] and dev.tolist() == [0]

"""The judge (pardnn.pipeline.judge) on hand-made graphs whose answers are worked out:
the bound `fits_surely` checks, and the rounds of repair it reports."""

import numpy as np

from pardnn.graph import NORMAL, REFERENCE, RESIDUAL, CostGraph
from pardnn.hardware import parse_devices
from pardnn.pipeline.judge import fits_surely, judge


def cpus(k, memory):
    return parse_devices(f"cpu:{k}").with_options(memory=memory, reserve=0.0)


def test_fits_surely_is_the_most_each_device_could_hold():
    """a (output 10, state 5, scratch 3) on device 0 sends 10 bytes to b (output 4) on
    device 1, beside a variable v (7 + state 2) and a reference r to it (nothing of its
    own); a control edge a -> v carries no buffer. Device 0 could hold 18 bytes at
    once, device 1 4 + 10 + 9 = 23: every placement fits 23 bytes a device, none fits
    one byte less."""
    g = CostGraph.build(["a", "b", "v", "r"], comp_us=[1, 1, 0, 0], out_bytes=[10, 4, 7, 100],
                        persist_bytes=[5, 0, 2, 100], temp_bytes=[3, 0, 0, 0],
                        kind=[NORMAL, NORMAL, RESIDUAL, REFERENCE],
                        edge_src=["a", "v", "a"], edge_dst=["b", "r", "v"], edge_bytes=[10, 7, 50],
                        edge_slot=[0, 0, -1])
    ix = g.index()
    device = np.zeros(4, np.int32)
    device[[ix["b"], ix["v"], ix["r"]]] = 1
    assert fits_surely(g, cpus(2, 23))(device)
    assert not fits_surely(g, cpus(2, 22))(device)
    one = np.zeros(4, np.int32)               # all on device 0: 18 + 4 + 9, nothing received
    assert fits_surely(g, cpus(2, 31))(one) and not fits_surely(g, cpus(2, 30))(one)


def test_the_judge_counts_its_rounds_of_repair():
    """Two variables of 150 bytes on one of two 191-byte devices: one round moves one
    of them, and the judge reports that one emulation after the first."""
    g = CostGraph.build(names=["va", "vb", "ra", "rb"], comp_us=[0, 0, 2, 3], out_bytes=[0, 0, 0, 0],
                        persist_bytes=[150, 150, 0, 0], group=["a", "b", "a", "b"],
                        edge_src=["va", "vb"], edge_dst=["ra", "rb"], edge_bytes=[0, 0])
    r = judge(g, cpus(2, 191), np.zeros(4, np.int32))
    assert r.rounds == 1 and r.peak_before.tolist() == [300, 0]
    assert sorted(r.profile.peak_bytes.tolist()) == [150, 150] and r.moved.sum() == 2


def test_fits_surely_says_nothing_past_exact_float_sums():
    """From 2**53 bytes on, float64 sums of bytes are no longer exact: a device that
    could hold 2**53 bytes is left to the emulator, however large its capacity."""
    from dataclasses import replace
    g = CostGraph.build(["a", "b"], comp_us=[1, 1], out_bytes=[2**53, 1])
    c = cpus(2, 2**60)
    c = replace(c, devices=(c.devices[0], replace(c.devices[1], memory=10)))
    assert not fits_surely(g, c)(np.array([0, 1], np.int32))
    g = CostGraph.build(["a", "b"], comp_us=[1, 1], out_bytes=[2**53 - 2, 1])
    assert fits_surely(g, c)(np.array([0, 1], np.int32))

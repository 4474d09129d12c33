"""ParDNN's refinement within memory (pardnn.pipeline.refine_memory): Step 1's moves again
after the overflow repair, each batch repaired before it is judged."""

import time

import numpy as np
import pytest

from pardnn.pipeline import place as placer
from pardnn.hardware import parse_devices
from pardnn.pipeline.report import evaluate
from pardnn.graph import CostGraph
from pardnn.pipeline.portfolio import choose
from pardnn.pipeline.judge import fits_surely
from pardnn.pipeline.refine_memory import judged_by_repair
from pardnn.io.summary import print_summary

from tools.synth_graph import synth_graph

UNLIMITED = 2**50


def tight(graph, k, fraction):
    """k CPU devices whose capacity is `fraction` of the graph's one-device peak."""
    one = parse_devices("cpu:1").with_options(memory=UNLIMITED)
    peak = evaluate(graph, one, np.zeros(graph.num_nodes, np.int32)).peak_memory_bytes[0]
    return parse_devices(f"cpu:{k}").with_options(memory=int(fraction * peak), reserve=0.0)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_refined_placement_fits_and_is_never_slower_than_the_repair_alone(seed):
    g = synth_graph(3000, seed=seed)
    cluster = tight(g, 4, 0.35)
    start = time.perf_counter()
    _, report = placer.place(g, cluster, "pardnn")
    wall = time.perf_counter() - start
    fit = report.refine_memory          # Step 1 overflowed, so the step ran
    assert report.feasible
    assert max(np.array(report.peak_memory_bytes) - cluster.capacity) <= 0
    assert report.makespan_us <= fit["makespan_after_repair_us"]
    stages = report.stage_seconds
    assert 0 < stages["refine_memory"] and sum(stages.values()) <= wall    # timed inside the call
    assert (fit["batches"] == 0) == (report.makespan_us == fit["makespan_after_repair_us"])
    assert "batches_far_behind" in fit          # the batches rejected unrepaired (docs/repair.md)
    placed = placer.place(g, cluster, "pardnn")[0].device
    first = choose(g, cluster, "pardnn").raw         # the winning candidate, before its repair
    assert report.changed_nodes == int(np.count_nonzero(placed != first))


def test_same_input_gives_the_same_refined_placement():
    g = synth_graph(2000, seed=3)
    cluster = tight(g, 4, 0.35)
    a, b = (placer.place(g, cluster, "pardnn")[0].device for _ in range(2))
    assert np.array_equal(a, b)


def test_baselines_are_repaired_but_not_refined():
    g = synth_graph(2000, seed=0)
    _, report = placer.place(g, tight(g, 4, 0.35), "etf")
    assert report.refine_memory is None and "refine_memory" not in report.stage_seconds


def test_the_judge_rejects_a_trial_no_repair_can_fit():
    """Two 100-byte outputs both live while c runs: 200 bytes at once on any device
    that runs c, above each device's 150, so no placement fits."""
    g = CostGraph.build(names=["a", "b", "c"], comp_us=[1, 1, 1], out_bytes=[100, 100, 1],
                        edge_src=[0, 1], edge_dst=[2, 2], edge_bytes=[100, 100])
    cluster = parse_devices("cpu:2").with_options(memory=150, reserve=0.0)
    assert judged_by_repair(g, cluster)(np.zeros(3, np.int32)) is None
    roomy = parse_devices("cpu:2").with_options(memory=1000, reserve=0.0)
    device, makespan, fixed = judged_by_repair(g, roomy)(np.zeros(3, np.int32))
    assert device.tolist() == [0, 0, 0] and makespan == pytest.approx(3.0) and not fixed.moved.any()


def test_a_trial_far_behind_before_its_repair_is_not_repaired():
    """a feeds c and b feeds d; all on one device, a's and b's outputs overlap (200
    bytes) above the capacity (150), and the step is 22 us. The repair moves a and c to
    the other device, where they run beside b and d: 11 us. A trial more than
    HOPELESS_SLACK behind the step to beat is rejected unrepaired, even so (the rule is
    a measured choice, not a bound); within it, it is repaired and judged."""
    from pardnn.emulator.scheduler import simulate
    from pardnn.pipeline.refine_memory import HOPELESS_SLACK
    g = CostGraph.build(names=["a", "b", "c", "d"], comp_us=[10, 10, 1, 1], out_bytes=[100, 100, 1, 1],
                        edge_src=[0, 1], edge_dst=[2, 3], edge_bytes=[100, 100])
    cluster = parse_devices("cpu:2").with_options(memory=150, reserve=0.0, bandwidth=1e6, latency=0.0)
    trial = np.zeros(4, np.int32)
    before = simulate(g, cluster, trial).makespan
    tally = {"far_behind": 0}
    judged = judged_by_repair(g, cluster, tally=tally)
    device, repaired, fixed = judged(trial, before)
    assert fixed.moved.any() and repaired < before / (1.0 + 2 * HOPELESS_SLACK) and tally["far_behind"] == 0
    assert judged(trial, before / (1.0 + 2 * HOPELESS_SLACK)) is None and tally["far_behind"] == 1


def test_the_summary_says_what_refining_within_memory_gained(capsys):
    g = synth_graph(3000, seed=0)
    _, report = placer.place(g, tight(g, 4, 0.35), "pardnn")
    print_summary(report.to_json())
    line = next(x for x in capsys.readouterr().out.splitlines() if "refined within memory" in x)
    assert f"{report.refine_memory['batches']} kept batch(es)" in line
    assert f"{report.changed_nodes} nodes" in line


def test_the_summary_gives_each_finalists_refined_step_and_the_kept_one(capsys):
    report = {"candidates": {"step1": {"feasible": True, "makespan_us": 2000.0},
                             "stages": {"feasible": True, "makespan_us": 1500.0, "refined_makespan_us": 1400.0},
                             "metis": {"feasible": True, "makespan_us": 1600.0, "refined_makespan_us": 1200.0},
                             "etf": {"feasible": False, "makespan_us": None}},
              "candidate": "metis"}
    from pardnn.io.summary import _candidates
    assert _candidates(report) == ("step1 2.000 ms, stages 1.500 ms (refined 1.400 ms), "
                                   "metis 1.600 ms (refined 1.200 ms, kept), etf infeasible")


@pytest.mark.parametrize("seed", range(4))
def test_a_trial_surely_fits_only_where_the_tracked_peak_fits(seed):
    """fits_surely's bound is never below a device's emulated peak: at one byte under
    the highest peak it never says "fits"; with room for every byte it does."""
    g = synth_graph(400, seed=seed, shape="chain" if seed % 2 else "dag")
    rng = np.random.default_rng(seed)
    g.temp_bytes[rng.random(g.num_nodes) < 0.2] = 1000
    for _ in range(10):
        k = int(rng.integers(1, 5))
        device = rng.integers(0, k, g.num_nodes).astype(np.int32)
        peak = evaluate(g, parse_devices(f"cpu:{k}").with_options(memory=UNLIMITED), device).peak_memory_bytes
        under = parse_devices(f"cpu:{k}").with_options(memory=max(peak) - 1, reserve=0.0)
        assert not fits_surely(g, under)(device)
        roomy = parse_devices(f"cpu:{k}").with_options(memory=UNLIMITED, reserve=0.0)
        assert fits_surely(g, roomy)(device)
        assert fits_surely(g, roomy)(np.zeros(0, np.int32))     # room for all: no placement read
        if k > 1:       # a byte short of holding everything: each device's own bound decides
            every = int(g.out_bytes.sum() + g.persist_bytes.sum() + g.temp_bytes.sum() + g.edge_bytes.sum())
            most = parse_devices(f"cpu:{k}").with_options(memory=every - 1, reserve=0.0)
            assert fits_surely(g, most)(device)


def test_refining_with_memory_to_spare_tracks_memory_once_with_the_same_result(monkeypatch):
    """Trials that surely fit are only emulated; the result, memory profile included, is
    what judging every trial with its memory gives."""
    import pardnn.pipeline.judge as judge_module
    import pardnn.pipeline.refine_memory as refine_memory
    from pardnn.graph.constraints import allowed_devices
    from pardnn.pipeline.judge import judge
    g = synth_graph(1500, seed=1)
    cluster = parse_devices("cpu:4").with_options(memory=UNLIMITED)
    fixed = judge(g, cluster, np.arange(g.num_nodes, dtype=np.int32) % 4)
    fast = refine_memory.refine_within_memory(g, cluster, fixed, allowed_devices(g, cluster), rounds=4)
    monkeypatch.setattr(judge_module, "fits_surely", lambda graph, cluster: lambda device: False)
    full = refine_memory.refine_within_memory(g, cluster, fixed, allowed_devices(g, cluster), rounds=4)
    assert fast.batches == full.batches > 0 and fast.refined_nodes == full.refined_nodes
    a, b = fast.judged, full.judged
    assert np.array_equal(a.device, b.device) and a.device.dtype == b.device.dtype
    assert a.schedule.makespan == b.schedule.makespan and a.rounds == b.rounds
    assert np.array_equal(a.moved, b.moved) and np.array_equal(a.peak_before, b.peak_before)
    assert np.array_equal(a.profile.peak_bytes, b.profile.peak_bytes)
    assert np.array_equal(a.profile.levels, b.profile.levels)


def test_a_candidate_without_its_profile_tracks_the_same_one_again():
    """Candidates wait and cross between processes without their memory profile
    (pardnn.pipeline.judge.without_profile); with_memory tracks it again: the same
    profile as the repair's last emulation, and the peaks before the repair kept."""
    from pardnn.pipeline.judge import judge, with_memory, without_profile
    g = CostGraph.build(names=["a", "b", "c", "d"], comp_us=[10, 10, 1, 1], out_bytes=[100, 100, 1, 1],
                        edge_src=[0, 1], edge_dst=[2, 3], edge_bytes=[100, 100])
    cluster = parse_devices("cpu:2").with_options(memory=150, reserve=0.0, bandwidth=1e6, latency=0.0)
    fixed = judge(g, cluster, np.zeros(4, np.int32))
    assert fixed.moved.any() and fixed.peak_before[0] > 150 >= fixed.profile.peak_bytes.max()
    light = without_profile(fixed)
    again = with_memory(g, cluster, light)
    assert light.profile is None and np.array_equal(again.peak_before, fixed.peak_before)
    for name in ("buf_alloc", "buf_free", "buf_bytes", "times", "levels", "peak_bytes"):
        assert np.array_equal(getattr(again.profile, name), getattr(fixed.profile, name))


def test_the_reported_peaks_before_repair_are_the_winners_when_candidates_drop_profiles():
    """The report's peaks before repair are those of the winning candidate's placement
    before its repair, though its profile was dropped while the others were built."""
    g = synth_graph(3000, seed=0)
    cluster = tight(g, 4, 0.35)
    _, report = placer.place(g, cluster, "pardnn")
    raw = choose(g, cluster, "pardnn").raw
    before = evaluate(g, cluster.with_options(memory=UNLIMITED), raw).peak_memory_bytes
    assert report.peak_memory_before_repair_bytes == [int(x) for x in before]
    assert max(before) > cluster.capacity[0] >= max(report.peak_memory_bytes)


def test_the_summary_gives_each_peak_against_the_memory_left_after_the_reserve(capsys):
    mib = 2**20
    report = {"algorithm": "etf", "num_nodes": 3, "num_edges": 2, "devices": ["GPU:0"], "nodes_per_device": [3],
              "peak_memory_bytes": [int(26.75 * mib)], "memory_capacity_bytes": [30 * mib], "reserve": 0.1,
              "comm_bytes": 0, "placement_seconds": 0.1}
    print_summary(report)
    assert "GPU:0: 3 nodes, peak 26.75 MiB of 27.00 MiB usable" in capsys.readouterr().out

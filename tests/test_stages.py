"""The stage candidate (pardnn.placers.stages) and ParDNN's portfolio of candidates
(pardnn.pipeline.portfolio), on hand-made training chains whose answer is known."""

import itertools
import time

import numpy as np
import pytest

from pardnn.cli import main
from pardnn.pipeline.report import evaluate
from pardnn.base.errors import UserError
from pardnn.hardware import parse_devices
from pardnn.pipeline import choice, place as placer, portfolio, workers
from pardnn.placers import exact, registry
from pardnn.placers import stages, step1
from pardnn.placers.stages import _cheapest_cuts, fold_positions
from pardnn.placers.registry import names

from helpers.held_worker import hold_worker_at
from helpers.training_chain import MB, cluster_at, training_chain
from tools.synth_graph import synth_graph

def test_backward_ops_fold_onto_their_forward_layers():
    g = training_chain(layers=4)
    pos, saved = fold_positions(g)
    at = {name: int(pos[i]) for i, name in enumerate(g.names)}
    for i in range(4):
        # b_i reads f_{i-1}'s output (or input's): it sits where that tensor was made
        assert at[f"b{i}"] == at["input" if i == 0 else f"f{i - 1}"]
        assert at[f"f{i}"] == g.index()[f"f{i}"]
    saved_names = {g.names[i] for i in np.flatnonzero(saved)}
    # the turn is the loss (the busiest op: five saved tensors and its own output alive);
    # read again after it: input and f0..f2 by b0..b3, the loss's own output by b3
    assert saved_names == {"input", "loss"} | {f"f{i}" for i in range(3)}


def test_a_chain_twice_one_device_is_cut_into_stages_with_one_transfer_each_way_per_cut():
    g = training_chain(layers=16)
    cluster = cluster_at(g, 4, 0.6)
    device = stages.place(g, cluster)
    used = np.unique(device)
    assert 2 <= len(used) <= 3
    layer_dev = [device[g.index()[f"f{i}"]] for i in range(16)]
    assert layer_dev == sorted(layer_dev)                      # contiguous stretches
    for i in range(16):                                         # a layer's backward stays with it
        assert device[g.index()[f"b{i}"]] == device[g.index()["input" if i == 0 else f"f{i - 1}"]]
    cross = device[g.edge_src] != device[g.edge_dst]
    forward = cross & (g.edge_dst > g.edge_src) & np.isin(g.edge_dst, [g.index()[f"f{i}"] for i in range(16)])
    cuts = len(used) - 1
    assert forward.sum() == cuts
    report = evaluate(g, cluster, device)
    assert report.feasible


def test_the_cheapest_feasible_cuts_win():
    mem = np.array([0, 1, 2, 3, 4], float)           # four groups of 1 byte
    cut = np.array([0, 0.5, 5.0, 0.1, 0])            # cut[j]: cost of the boundary before group j
    assert _cheapest_cuts(mem, cut, cap=4, k=3).tolist() == [0, 4]           # fits on one
    assert _cheapest_cuts(mem, cut, cap=3, k=3).tolist() == [0, 3, 4]        # cheapest single cut
    assert _cheapest_cuts(mem, cut, cap=2, k=3).tolist() == [0, 1, 3, 4]     # avoids the 5.0 cut
    assert _cheapest_cuts(mem, cut, cap=2, k=2).tolist() == [0, 2, 4]        # the only 2-stage split


@pytest.mark.parametrize("seed", [1, 2])
def test_pardnn_beats_every_other_placer_on_a_near_chain_that_does_not_fit(seed):
    g = synth_graph(2000, seed=seed, shape="chain")
    cluster = cluster_at(g, 4, 0.3)
    _, report = placer.place(g, cluster, "pardnn")
    assert report.feasible and report.candidate != "step1"
    for name in names():
        if name == "pardnn":
            continue
        try:
            _, other = placer.place(g, cluster, name)
        except UserError:
            continue
        assert report.makespan_us <= other.makespan_us * (1 + 1e-9), name


def test_the_winner_is_one_of_the_two_fastest_candidates_and_refinement_never_hurts():
    g = synth_graph(2000, seed=3)
    cluster = cluster_at(g, 4, 0.35)
    chosen = portfolio.choose(g, cluster, "pardnn")
    feasible = {n: c["makespan_us"] for n, c in chosen.candidates.items() if c.get("feasible")}
    few = {n: t for n, t in feasible.items()
           if chosen.candidates[n]["moved_nodes"] <= choice.MAX_MOVED_SHARE * g.num_nodes}
    two = sorted(few or feasible, key=(few or feasible).get)[:2]
    assert feasible and chosen.winner in two
    final = evaluate(g, cluster, chosen.judged.device)
    assert final.feasible
    assert final.makespan_us <= min(feasible[n] for n in two) + 1e-6
    refined = {n: chosen.candidates[n]["refined_makespan_us"] for n in two if "refined_makespan_us" in chosen.candidates[n]}
    assert final.makespan_us == pytest.approx(min([feasible[n] for n in two if n not in refined] + list(refined.values())))


def test_a_runner_up_that_refines_faster_than_the_winner_wins():
    # here the stage cut is the fastest candidate (141.5 ms) and METIS's the second
    # (145.1 ms), but refined within memory METIS's gets to 135.8 ms, stages' to 137.6
    g = synth_graph(1500, seed=0, shape="chain")
    cluster = cluster_at(g, 8, 0.3)
    chosen = portfolio.choose(g, cluster, "pardnn")
    c = chosen.candidates
    assert c["stages"]["makespan_us"] < c["metis"]["makespan_us"]
    assert c["metis"]["refined_makespan_us"] < c["stages"]["refined_makespan_us"]
    assert chosen.winner == "metis"
    assert evaluate(g, cluster, chosen.judged.device).makespan_us == pytest.approx(c["metis"]["refined_makespan_us"])


def test_etf_row_is_matched_where_step1_and_the_repair_lost_to_it():
    # 0.3x memory on this graph: Step 1 cannot even be repaired, m-ETF can; pardnn
    # still matches m-ETF. (The graph was synth_graph(5000, seed=4) until Step 1 stopped
    # using BLAS products, whose rounding differed between machines: there Step 1's
    # repair failed on one VM and fitted on another.)
    g = synth_graph(2000, seed=3)
    cluster = cluster_at(g, 4, 0.3)
    _, etf = placer.place(g, cluster, "etf")
    _, pardnn = placer.place(g, cluster, "pardnn")
    assert pardnn.candidates["step1"]["feasible"] is False
    assert pardnn.makespan_us <= etf.makespan_us


def test_report_names_every_candidate_and_the_same_input_gives_the_same_placement():
    g = synth_graph(1500, seed=4, shape="chain")
    cluster = cluster_at(g, 4, 0.4)
    (a, ra), (b, rb) = placer.place(g, cluster, "pardnn"), placer.place(g, cluster, "pardnn")
    assert np.array_equal(a.device, b.device)
    one_host = set(registry.candidates("pardnn")) - {"hier", "exact", "etf-fastest", "heft-fastest"}
    assert set(ra.candidates) == one_host        # one host of alike devices, too large for the exact model
    assert ra.candidate == rb.candidate and ra.step1_output in {"thesis", "affinity", "one-device"}


def test_a_spent_budget_skips_the_later_candidates():
    g = synth_graph(1500, seed=4)
    chosen = portfolio.choose(g, parse_devices("cpu:4"), "pardnn", budget_s=1e-9)
    assert chosen.winner == "step1"
    assert all("skipped" in chosen.candidates[n] for n in registry.candidates("pardnn")[1:]
               if n not in ("hier", "exact", "etf-fastest", "heft-fastest"))


def test_a_candidate_runs_only_where_its_registry_test_applies(monkeypatch):
    g = synth_graph(100, seed=1)
    cluster = parse_devices("cpu:2")
    assert registry.PLACERS["exact"].applies and "exact" in portfolio.choose(g, cluster, "pardnn").candidates
    monkeypatch.setattr(exact, "MAX_NODES", g.num_nodes - 1)       # now too large for the exact model
    assert "exact" not in portfolio.choose(g, cluster, "pardnn").candidates


def test_without_a_time_budget_no_clock_changes_the_answer(monkeypatch):
    # a clock 1000 s further on at every reading: a machine far slower than any budget
    g = synth_graph(1500, seed=4)
    cluster = cluster_at(g, 4, 0.35)
    steady = portfolio.choose(g, cluster, "pardnn")
    clock = itertools.count(step=1000.0)
    monkeypatch.setattr(time, "perf_counter", lambda: next(clock))
    slow = portfolio.choose(g, cluster, "pardnn")
    assert np.array_equal(slow.judged.device, steady.judged.device) and slow.winner == steady.winner
    drop = {"seconds"}
    assert [{k: v for k, v in c.items() if k not in drop} for c in slow.candidates.values()] == \
        [{k: v for k, v in c.items() if k not in drop} for c in steady.candidates.values()]
    assert not any("skipped" in c for c in slow.candidates.values())
    capped = portfolio.choose(g, cluster, "pardnn", budget_s=300.0)    # a cap a user set does cut
    assert all("skipped" in capped.candidates[n] for n in registry.candidates("pardnn")[1:]
               if n not in ("hier", "exact", "etf-fastest", "heft-fastest"))


@pytest.mark.parametrize("budget", ["0", "-5s", "soon", "-5", "1e30", "nan", "2days"])
def test_a_time_budget_that_is_not_positive_exits_2(tmp_path, capsys, budget):
    path = tmp_path / "g.json"
    training_chain(3).to_json(str(path))
    assert main(["place", str(path), "--devices", "cpu:2", f"--time-budget={budget}",
                 "-o", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--time-budget" in err[0]
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("cpus", [2, 3])
def test_candidates_built_in_worker_processes_give_the_same_placement(monkeypatch, cpus):
    # with 2 CPUs one worker builds them while the main process, after Step 1, takes
    # those it has not started
    g = synth_graph(1500, seed=5, shape="chain")
    cluster = cluster_at(g, 4, 0.35)
    inline = portfolio.choose(g, cluster, "pardnn")
    monkeypatch.setattr(workers, "PARALLEL_MIN_NODES", 0)
    monkeypatch.setattr(workers, "usable_cpus", lambda: cpus)
    forked = portfolio.choose(g, cluster, "pardnn")
    assert forked.winner == inline.winner
    assert np.array_equal(forked.judged.device, inline.judged.device)
    assert {n: c.get("makespan_us") for n, c in forked.candidates.items()} == \
        {n: c.get("makespan_us") for n, c in inline.candidates.items()}
    from pardnn.pipeline.bounds import step_lower_bound     # found here while the worker refined the runner-up
    assert inline.step_bound is None and forked.step_bound == step_lower_bound(g, cluster, exact_model=False)


def test_a_candidate_is_taken_once_by_whoever_claims_it_first():
    import multiprocessing
    claims = multiprocessing.get_context("fork").Array("b", 3)
    assert workers.claimed(claims, 1) and not workers.claimed(claims, 1)
    assert workers.claimed(claims, 0) and list(claims) == [1, 1, 0]


def test_pardnn_fits_wherever_a_repaired_single_device_placement_fits():
    """An mlp-like tiny chain on 2 devices, at capacities around the least one at which
    any placement fits (0.74 of its one-device peak, found by the complete search):
    wherever the repair of everything-on-one-device fits, `--algorithm pardnn` fits
    too, and below, where the search proves no placement fits, pardnn says the same."""
    g = training_chain(layers=5, act=MB, grad=MB)
    fits = []
    for fraction in np.arange(0.68, 0.81, 0.02):
        cluster = cluster_at(g, 2, fraction)
        try:
            _, single = placer.place(g, cluster, "single")
        except UserError as exc:
            assert "no placement fits" in str(exc)
            with pytest.raises(UserError, match="no placement fits"):
                placer.place(g, cluster, "pardnn")
            fits.append(False)
            continue
        assert single.moved_nodes > 0                    # the repair made it fit
        _, report = placer.place(g, cluster, "pardnn")
        assert report.feasible and max(report.peak_memory_bytes) <= cluster.capacity.min()
        fits.append(True)
    assert fits == sorted(fits) and 2 <= sum(fits) <= 5       # both sides of the least capacity


def test_range_argmin_matches_brute_force_and_empty_ranges_give_minus_one():
    from pardnn.placers.stages import _range_argmin
    rng = np.random.default_rng(0)
    for _ in range(200):
        n = int(rng.integers(1, 12))
        values = rng.integers(0, 5, n).astype(float)
        values[rng.random(n) < 0.2] = np.inf
        lo = rng.integers(0, n + 1, 8)
        hi = rng.integers(0, n + 1, 8)
        got = _range_argmin(values, lo, hi)
        for q in range(8):
            window = values[lo[q]:hi[q]]
            want = -1 if len(window) == 0 or not np.isfinite(window.min()) else lo[q] + int(np.argmin(window))
            assert got[q] == want


@pytest.mark.parametrize("text, seconds", [("90", 90.0), ("1.5", 1.5), ("90s", 90.0), ("1500ms", 1.5),
                                                  ("1e3", 1000.0), ("1.5e2", 150.0)])
def test_a_plain_time_budget_is_seconds(text, seconds):
    from argparse import Namespace
    from pardnn.commands.common import budget_from_args
    assert budget_from_args(Namespace(time_budget=text)) == pytest.approx(seconds)


def test_refinement_within_memory_starts_no_batch_after_its_deadline():
    from pardnn.graph.constraints import allowed_devices
    from pardnn.pipeline.judge import judge
    from pardnn.pipeline.refine_memory import refine_within_memory
    g = synth_graph(1500, seed=2)
    cluster = cluster_at(g, 4, 0.35)
    fixed = judge(g, cluster, np.zeros(g.num_nodes, np.int32))
    late = refine_within_memory(g, cluster, fixed, allowed_devices(g, cluster), rounds=4, deadline=0.0)
    assert late.stopped_by_budget and late.batches == 0
    assert np.array_equal(late.judged.device, fixed.device)
    free = refine_within_memory(g, cluster, fixed, allowed_devices(g, cluster), rounds=4)
    assert not free.stopped_by_budget and free.batches > 0


@pytest.mark.parametrize("cpus", [1, 2])
def test_the_peaks_before_repair_of_a_refined_winner_are_its_candidates_wherever_tracked(monkeypatch, cpus):
    """With memory to spare the winner (HEFT here) is judged without tracking its memory
    and refined; its peaks before repair, tracked by an idle worker beside the
    refinement or here after it, are the emulated peaks of the candidate as built."""
    from pardnn.emulator.memory import track_memory
    from pardnn.emulator.scheduler import simulate
    g = synth_graph(1500, seed=0, shape="chain")
    cluster = parse_devices("cpu:4").with_options(memory=2**50, bandwidth=12000.0, latency=25.0)
    monkeypatch.setattr(workers, "PARALLEL_MIN_NODES", 0)
    monkeypatch.setattr(workers, "usable_cpus", lambda: cpus)
    chosen = portfolio.choose(g, cluster, "pardnn")
    assert chosen.winner == "heft" and chosen.refinement.batches > 0
    assert not np.array_equal(chosen.judged.device, chosen.raw)
    peaks = track_memory(g, cluster, chosen.raw, simulate(g, cluster, chosen.raw)).peak_bytes
    assert chosen.judged.peak_before.dtype == np.int64 and np.array_equal(chosen.judged.peak_before, peaks)


def test_a_worker_that_dies_leaves_its_candidate_out_and_the_placement_goes_on(monkeypatch):
    """A worker that dies building a candidate breaks the pool: that candidate is marked
    as died, the refinement's jobs (here the winner's peaks beside it) fall back to this
    process, and the placement is the one a portfolio without that candidate gives."""
    import os
    g = synth_graph(1500, seed=0, shape="chain")
    cluster = parse_devices("cpu:4").with_options(memory=2**50, bandwidth=12000.0, latency=25.0)
    monkeypatch.setattr(workers, "PARALLEL_MIN_NODES", 0)
    monkeypatch.setattr(workers, "usable_cpus", lambda: 3)
    parent, build = os.getpid(), portfolio._build_and_judge

    def dies_building_stages(judging, name, timings=None):
        if os.getpid() != parent and name == "stages":
            os._exit(3)
        return build(judging, name, timings)
    monkeypatch.setattr(portfolio, "_build_and_judge", dies_building_stages)
    chosen = portfolio.choose(g, cluster, "pardnn")
    assert chosen.candidates["stages"]["reason"] == "its worker process died"
    assert chosen.winner == "heft" and chosen.refinement.batches > 0
    from pardnn.emulator.memory import track_memory
    from pardnn.emulator.scheduler import simulate
    peaks = track_memory(g, cluster, chosen.raw, simulate(g, cluster, chosen.raw)).peak_bytes
    assert np.array_equal(chosen.judged.peak_before, peaks)


@pytest.mark.parametrize("held", ["single", "round-robin"])
def test_a_leader_refined_while_a_worker_still_builds_gives_the_same_placement(monkeypatch, held):
    """When Step 1 ends with a worker still building, and the fastest candidate known
    (HEFT here) has Step 1 as it is for runner-up, this process refines it at once
    instead of waiting, and that refinement is the one kept; the worker, once idle,
    finds the report's lower bound. Events hold the worker at candidate `held` until
    that choice is made, so it is tested every time: the placement and report are those
    of a portfolio built in turn. Held at the last one, the worker tracks the leader's
    peaks before repair; held before it (a candidate still queued, which a job would
    wait behind), they are tracked here."""
    from pardnn.pipeline.bounds import step_lower_bound
    g = synth_graph(1500, seed=0, shape="chain")
    cluster = parse_devices("cpu:4").with_options(memory=2**50, bandwidth=12000.0, latency=25.0)
    inline_placement, inline_report = placer.place(g, cluster, "pardnn")
    monkeypatch.setattr(workers, "PARALLEL_MIN_NODES", 0)
    monkeypatch.setattr(workers, "usable_cpus", lambda: 2)
    fired, asked = hold_worker_at(monkeypatch, held)
    chosen = []
    monkeypatch.setattr(placer, "choose", lambda *args: chosen.append(portfolio.choose(*args)) or chosen[-1])
    placement, report = placer.place(g, cluster, "pardnn")
    assert list(fired[0][0]) == ["heft"] and fired[0][1] is not None
    assert chosen[0].winner == "heft" and chosen[0].refinement is fired[0][0]["heft"][1]
    assert asked == ([0] if held == "single" else [])          # asked for during the early refinement
    if held == "single":
        assert chosen[0].step_bound == step_lower_bound(g, cluster, exact_model=False)    # found by the idle worker
    assert np.array_equal(placement.device, inline_placement.device)
    assert untimed(report) == untimed(inline_report)


def untimed(report) -> dict:
    """report.json without the seconds anything took."""
    out = {k: v for k, v in report.to_json().items() if k not in ("stage_seconds", "placement_seconds")}
    out["candidates"] = {n: {k: v for k, v in c.items() if k != "seconds"} for n, c in report.candidates.items()}
    return out


def test_a_worker_killed_while_sending_leaves_no_reader_waiting():
    """workers() kills workers that may be halfway through sending a large answer (a
    candidate a time budget no longer waits for): the pool's reading thread then waits
    for the rest of it, and the interpreter for that thread, unless this process's end
    of the pipe is closed (`_unblock`)."""
    import multiprocessing
    import os
    import struct
    import threading
    from pardnn.pipeline.workers import _unblock

    context = multiprocessing.get_context("fork")
    results = context.SimpleQueue()
    sender = context.Process(target=lambda: (os.write(results._writer.fileno(), struct.pack("!i", 10**6) + b"x"),
                                             os._exit(0)))
    sender.start()
    sender.join()                           # it died after 1 byte of a 1 MB answer
    ended = []

    def read():
        try:
            results._reader.recv_bytes()
        except OSError as exc:              # "got end of file during message"
            ended.append(str(exc))
    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(0.5)
    assert reader.is_alive()                # waiting for the rest
    _unblock(results)
    reader.join(5.0)
    assert not reader.is_alive() and ended == ["got end of file during message"]


def test_a_time_budget_starts_after_step1(monkeypatch):
    """`--time-budget` caps the work after Step 1: a Step 1 slower than the budget
    leaves the other candidates their budget (a clock that runs 1000 s during Step 1)."""
    g = synth_graph(1500, seed=4)
    late = [0.0]
    clock = time.perf_counter
    monkeypatch.setattr(time, "perf_counter", lambda: clock() + late[0])
    partition = step1.partition

    def slow_step1(*args, **kwargs):
        late[0] += 1000.0
        return partition(*args, **kwargs)
    monkeypatch.setattr(step1, "partition", slow_step1)
    chosen = portfolio.choose(g, parse_devices("cpu:4"), "pardnn", budget_s=300.0)
    assert not any("skipped" in c for c in chosen.candidates.values())


def test_a_candidate_done_when_the_budget_ends_is_kept():
    class Done:
        @staticmethod
        def done():
            return True

        @staticmethod
        def result(timeout):
            return "built"
    assert portfolio._collect(Done(), deadline=time.perf_counter() - 1.0) == "built"


def test_workers_close_the_result_pipe_once_they_are_killed(monkeypatch):
    from pardnn.pipeline.judge import Judging
    closed = []
    monkeypatch.setattr(workers, "_unblock", closed.append)
    monkeypatch.setattr(workers, "PARALLEL_MIN_NODES", 0)
    monkeypatch.setattr(workers, "usable_cpus", lambda: 2)
    judging = Judging(synth_graph(50, seed=1), parse_devices("cpu:2"))
    with workers.workers(judging, ["etf"], portfolio._build_and_judge, portfolio._refine_in_worker) as pool:
        assert pool.parallel
    assert len(closed) == 1 and hasattr(closed[0], "_writer")


def test_the_earlier_fold_is_kept_where_it_refines_faster():
    # tools/synth_graph's 1k near-chain (seed 4) at K = 2 and 0.6x the one-device peak:
    # folded at the busiest op the stages refine to 115.1 ms, folded where the live bytes
    # peak to 110.1 ms (the placement_snapshot row of every release before issue 40)
    g = synth_graph(1000, seed=4, shape="chain")
    peak = int(evaluate(g, parse_devices("cpu:1").with_options(memory=2**50), np.zeros(g.num_nodes, np.int32))
               .peak_memory_bytes[0])
    cluster = parse_devices("cpu:2").with_options(memory=int(0.6 * peak), bandwidth=12000.0, latency=25.0)
    assert not np.array_equal(stages.place(g, cluster), stages.place_at_live_peak(g, cluster))
    chosen = portfolio.choose(g, cluster, "pardnn")
    assert chosen.winner == "stages-live"
    assert chosen.candidates["stages-live"]["refined_makespan_us"] < chosen.candidates["stages"]["refined_makespan_us"]
    assert evaluate(g, cluster, chosen.judged.device).makespan_us == pytest.approx(110051.5, abs=0.1)

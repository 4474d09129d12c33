"""The portfolio's executor (pardnn.pipeline.portfolio) on graphs of about 150 nodes,
fast enough to run against each of its mutants (tools/mutation.py): the placement
kept, the same with worker processes as without, a time budget that skips the
candidates not ready, the results of jobs whose worker died or ran past the budget,
the extras and the local search when nothing fits, and the memo of placements that
read no memory."""

import math
import time
from concurrent import futures
from concurrent.futures.process import BrokenProcessPool

import numpy as np
import pytest

from pardnn.base.errors import UserError
from pardnn.hardware import parse_devices
from pardnn.pipeline import choice, portfolio, workers
from pardnn.pipeline.bounds import step_lower_bound
from pardnn.pipeline.judge import Judging
from pardnn.placers import registry

from helpers.held_worker import hold_worker_at
from helpers.training_chain import cluster_at
from tools.synth_graph import synth_graph


def chain_at(fraction, seed=0):
    """A 150-node training-like chain on 4 devices with `fraction` of its one-device peak each."""
    g = synth_graph(150, seed=seed, shape="chain")
    return g, cluster_at(g, 4, fraction)


def forked(monkeypatch, cpus):
    monkeypatch.setattr(workers, "PARALLEL_MIN_NODES", 0)
    monkeypatch.setattr(workers, "usable_cpus", lambda: cpus)


def jobs_asked(monkeypatch) -> list:
    """The names of the jobs (peaks, bound) the forked workers are asked for, in order."""
    asked = []
    for job in ("peaks", "bound"):
        original = getattr(workers.Forked, job)
        monkeypatch.setattr(workers.Forked, job, lambda self, *a, job=job, original=original:
                            asked.append(job) or original(self, *a))
    return asked


def makespans(chosen):
    return {name: (c.get("makespan_us"), c.get("refined_makespan_us")) for name, c in chosen.candidates.items()}


def test_the_placement_kept_is_the_faster_refined_finalist():
    g, cluster = chain_at(0.35)
    chosen = portfolio.choose(g, cluster, "pardnn", timings=(timings := {}))
    roles = choice.roles("pardnn", g, cluster)
    assert list(chosen.candidates) == [n for n in roles.order if n in {roles.first, *roles.beside}]
    refined = {n: c["refined_makespan_us"] for n, c in chosen.candidates.items() if "refined_makespan_us" in c}
    assert len(refined) == 2 and chosen.winner == min(refined, key=refined.get)
    assert chosen.judged.schedule.makespan == refined[chosen.winner] == chosen.refinement.judged.schedule.makespan
    assert chosen.judged.profile is not None and chosen.judged.peak_before is not None
    assert np.array_equal(chosen.raw, portfolio.build(g, cluster, chosen.winner))
    assert chosen.step1_output in ("thesis", "affinity", "one-device") and chosen.step_bound is None
    for name, entry in chosen.candidates.items():
        assert entry["feasible"] and entry["seconds"] >= 0 and entry["makespan_us"] > 0, name
    assert {"repair", "refine_memory", "heft", "metis"} <= set(timings) and "step1" not in timings


@pytest.mark.parametrize("cpus", [2, 3])
def test_worker_processes_give_the_same_placement(monkeypatch, cpus):
    g, cluster = chain_at(0.35)
    inline = portfolio.choose(g, cluster, "pardnn")
    forked(monkeypatch, cpus)
    asked = jobs_asked(monkeypatch)
    chosen = portfolio.choose(g, cluster, "pardnn")
    assert asked == []              # two refined: the second by a worker, the bound found here meanwhile
    assert chosen.winner == inline.winner and np.array_equal(chosen.judged.device, inline.judged.device)
    assert np.array_equal(chosen.raw, inline.raw) and makespans(chosen) == makespans(inline)
    assert chosen.judged.peak_before.tolist() == inline.judged.peak_before.tolist()
    assert chosen.step_bound == step_lower_bound(g, cluster, exact_model=False)


def test_a_spent_budget_keeps_the_first_candidate_alone():
    g, cluster = chain_at(0.35)
    chosen = portfolio.choose(g, cluster, "pardnn", budget_s=1e-9)
    assert chosen.winner == "step1" and chosen.candidates["step1"]["feasible"]
    rest = [name for name in chosen.candidates if name != "step1"]
    assert rest and all(chosen.candidates[name] == {"skipped": "time budget spent"} for name in rest)
    assert portfolio.SKIPPED.entry == {"skipped": "time budget spent"}


def test_a_spent_budget_with_workers_keeps_only_candidates_ready(monkeypatch):
    g, cluster = chain_at(0.35)
    forked(monkeypatch, 2)
    chosen = portfolio.choose(g, cluster, "pardnn", budget_s=1e-9)
    assert chosen.candidates["step1"]["feasible"] and "skipped" not in chosen.candidates[chosen.winner]
    assert any("skipped" in entry for entry in chosen.candidates.values())


class Job:
    """A job's future: its answer, or the error it raises; the timeout it was asked with."""

    def __init__(self, answer=None, error=None, done=True):
        self.answer, self.error, self.is_done, self.asked = answer, error, done, []

    def done(self):
        return self.is_done

    def result(self, timeout):
        self.asked.append(timeout)
        if self.error is not None:
            raise self.error
        return self.answer


def test_a_job_past_the_budget_is_skipped_and_one_whose_worker_died_is_left_out():
    past, later = time.perf_counter() - 1.0, time.perf_counter() + 100.0
    assert portfolio._collect(Job("built", done=False), math.inf) == "built"
    assert portfolio._collect(Job("built"), past) == "built"                     # done in time
    skipped = portfolio._collect(Job("built", done=False), past)
    assert skipped.entry == {"skipped": "time budget spent"} and skipped.device is None
    skipped.entry["changed"] = True                                             # each its own entry
    assert portfolio.SKIPPED.entry == {"skipped": "time budget spent"}
    assert portfolio._collect(Job(error=futures.TimeoutError()), later).entry == {"skipped": "time budget spent"}
    died = portfolio._collect(Job(error=BrokenProcessPool()), later)
    assert died.entry == {"feasible": False, "makespan_us": None, "reason": "its worker process died"}
    died.entry["changed"] = True
    assert "changed" not in portfolio.DIED.entry and died.judged is None
    waited = Job("built", done=False)
    portfolio._collect(waited, later)
    assert 99.0 < waited.asked[0] <= 100.0
    with pytest.raises(ValueError):
        portfolio._collect(Job(error=ValueError("a bug")), later)


def test_how_long_a_job_is_waited_for():
    assert portfolio._left(math.inf) is None and portfolio._left(math.inf, 60.0) is None
    assert portfolio._left(time.perf_counter() - 5.0) == 0.0
    assert portfolio._left(time.perf_counter() - 5.0, 60.0) == 60.0
    assert 9.0 < portfolio._left(time.perf_counter() + 10.0) <= 10.0
    assert 69.0 < portfolio._left(time.perf_counter() + 10.0, 60.0) <= 70.0


def test_a_refinement_in_a_worker_is_waited_for_past_the_budget_by_a_grace():
    assert portfolio.REFINE_GRACE_S == 60.0
    done = Job("refined")
    assert portfolio._collect_refined(done, math.inf) == "refined" and done.asked == [None]
    late = Job("refined")
    assert portfolio._collect_refined(late, time.perf_counter() - 1.0) == "refined" and late.asked == [60.0]
    assert portfolio._collect_refined(Job(error=futures.TimeoutError()), math.inf) is None
    assert portfolio._collect_refined(Job(error=BrokenProcessPool()), math.inf) is None


def test_candidates_judged_once_are_taken_by_choose_at_that_cluster_only():
    g, cluster = chain_at(0.35)
    judged = portfolio.judge_all(g, cluster, "pardnn")
    roles = choice.roles("pardnn", g, cluster)
    assert list(judged.candidates) == [roles.first] + [n for n in roles.order if n in roles.beside]
    assert judged.cluster is cluster and judged.step1_output is not None and judged.timings
    again = portfolio.choose(g, cluster, "pardnn", judged=judged)
    fresh = portfolio.choose(g, cluster, "pardnn")
    assert again.winner == fresh.winner and np.array_equal(again.judged.device, fresh.judged.device)
    assert makespans(again) == makespans(fresh) and again.step1_output == fresh.step1_output
    with pytest.raises(ValueError, match="another cluster"):
        portfolio.choose(g, cluster_at(g, 4, 0.35), "pardnn", judged=judged)


def test_when_nothing_fits_the_extras_are_built_then_the_closest_searched(monkeypatch):
    g, cluster = chain_at(0.27)
    monkeypatch.setattr(choice, "EXTRAS_MAX_NODES", 0)      # the extras are the fallback here
    roles = choice.roles("pardnn", g, cluster)
    assert roles.extra and not set(roles.extra) & set(roles.beside)
    collected, searched = [], []
    collect_all, search = portfolio._collect_all, portfolio.searched
    monkeypatch.setattr(portfolio, "_collect_all", lambda *a: collected.append(collect_all(*a)) or collected[-1])
    monkeypatch.setattr(portfolio, "searched", lambda j, r: searched.append((dict(r), search(j, r))) or searched[-1][1])
    with pytest.raises(UserError, match="memory"):
        portfolio.choose(g, cluster, "pardnn")
    assert set(roles.extra) <= set(collected[0]) and not any(collected[0][n].judged for n in collected[0])
    before, tried = searched[0]
    errors = {name: r.error for name, r in before.items() if r.device is not None}
    assert list(tried) == choice.closest_stuck(errors) and len(tried) == choice.SEARCHED


def test_a_placement_that_reads_no_memory_is_made_once_per_graph_and_devices():
    g, cluster = chain_at(0.35)
    assert not registry.PLACERS["metis"].reads_memory
    made, timings = {}, {}
    first = portfolio.build(g, cluster, "metis", made)
    first[:] = -1                                                    # a copy: the memo is not changed
    again = portfolio.build(g, cluster_at(g, 4, 0.9), "metis", timings)
    assert (again >= 0).all() and again.dtype == np.int32 and timings == made   # its stages, each time
    assert np.array_equal(again, portfolio.build(g, parse_devices("cpu:4"), "metis"))


def test_the_first_candidate_says_what_step1_returned_only_on_devices_at_rate_1():
    g, cluster = chain_at(0.35)
    judging = Judging(g, cluster)
    results, output = portfolio._first(judging, "step1", {}, alone=True)
    assert output in ("thesis", "affinity", "one-device") and results["step1"].judged.profile is not None
    results, _ = portfolio._first(judging, "step1", {})
    assert results["step1"].judged.profile is None                  # without its profile unless alone
    rated = parse_devices("dgx-h100:2+host")
    assert not rated.uniform
    assert portfolio._first(Judging(g, rated.with_options(memory=2**40)), "step1", {})[1] is None


def spare(seed=0):
    """A 150-node chain on 4 devices with memory to spare: candidates judged by emulation
    alone (no memory tracked), and at seed 0 m-ETF refined past Step 1 as it is."""
    g = synth_graph(150, seed=seed, shape="chain")
    return g, parse_devices("cpu:4").with_options(memory=2**50, bandwidth=12000.0, latency=25.0)


@pytest.mark.parametrize("cpus", [1, 2])
def test_the_peaks_before_repair_of_the_refined_winner_are_its_candidates(monkeypatch, cpus):
    from pardnn.emulator.memory import track_memory
    from pardnn.emulator.scheduler import simulate
    g, cluster = spare()
    forked(monkeypatch, cpus)
    asked = jobs_asked(monkeypatch)
    chosen = portfolio.choose(g, cluster, "pardnn")
    assert chosen.winner == "etf" and chosen.refinement.batches > 0
    # one finalist refined (Step 1 as it is is not): the worker tracks its peaks meanwhile, then finds the bound
    assert sorted(asked) == ([] if cpus == 1 else ["bound", "peaks"])
    assert not np.array_equal(chosen.judged.device, chosen.raw)
    peaks = track_memory(g, cluster, chosen.raw, simulate(g, cluster, chosen.raw)).peak_bytes
    assert chosen.judged.peak_before.dtype == np.int64 and np.array_equal(chosen.judged.peak_before, peaks)


def test_an_early_refinement_is_taken_only_for_the_placement_it_was_run_on():
    """`_pick` takes a refinement run early only for a finalist, and only for the very
    placement it was run on; any other (here a deliberately wrong one) is ignored."""
    g, cluster = spare()
    judging = Judging(g, cluster)
    results, output = portfolio._first(judging, "step1", {})
    results.update({name: portfolio._build_and_judge(judging, name) for name in ("etf", "heft")})
    run = portfolio._Run(judging, workers.Inline(judging, portfolio._build_and_judge, portfolio._refine),
                         math.inf, {})

    def picked(early):
        return portfolio._pick(run, dict(results), output, early)
    plain = picked(None)
    assert plain.winner == "etf" and plain.refinement.batches > 0
    wrong = portfolio._refine(judging, results["heft"].judged, math.inf)
    for early in ({"heft": (results["heft"].judged, wrong)}, {"etf": (results["heft"].judged, wrong)}):
        chosen = picked(early)
        assert np.array_equal(chosen.judged.device, plain.judged.device) and chosen.candidates == plain.candidates
    assert picked({"etf": (results["etf"].judged, plain.refinement)}).refinement is plain.refinement


def test_each_finalist_is_refined_once(monkeypatch):
    g, cluster = chain_at(0.35)
    calls = []
    refine = portfolio.refine_within_memory
    monkeypatch.setattr(portfolio, "refine_within_memory", lambda *a, **k: calls.append(1) or refine(*a, **k))
    chosen = portfolio.choose(g, cluster, "pardnn")
    assert len(calls) == sum("refined_makespan_us" in c for c in chosen.candidates.values()) == 2


def test_the_seconds_recorded_are_the_time_taken():
    g, cluster = chain_at(0.3)                                      # some candidates do not fit
    t0 = time.perf_counter()
    chosen = portfolio.choose(g, cluster, "pardnn", timings=(timings := {}))
    wall = time.perf_counter() - t0
    assert all(0.0 <= c["seconds"] <= wall for c in chosen.candidates.values())
    assert all(0.0 <= s <= wall for s in timings.values()) and timings["refine_memory"] > 0.0
    failed = [c for c in chosen.candidates.values() if not c["feasible"]]
    assert failed and all(set(c) == {"feasible", "makespan_us", "reason", "seconds"} and c["makespan_us"] is None
                          and c["reason"].startswith("memory:") for c in failed)
    first, _ = portfolio._first(Judging(g, cluster), "step1", {})
    assert first["step1"].build_s == 0.0 and 0.0 <= first["step1"].repair_s <= wall  # (its stages: timings)
    for r in (portfolio.SKIPPED, portfolio.DIED):
        assert (r.device, r.judged, r.error, r.build_s, r.repair_s) == (None, None, None, 0.0, 0.0)


def test_a_job_with_time_left_is_waited_for():
    job = Job("built", done=False)
    assert portfolio._collect(job, time.perf_counter() + 0.5) == "built" and 0.0 < job.asked[0] <= 0.5


def test_a_budget_that_is_not_spent_skips_nothing():
    g, cluster = chain_at(0.35)
    chosen = portfolio.choose(g, cluster, "pardnn", budget_s=600.0)
    assert not any("skipped" in c for c in chosen.candidates.values())
    assert makespans(chosen) == makespans(portfolio.choose(g, cluster, "pardnn"))


def test_only_a_portfolio_of_one_keeps_its_candidates_memory_profile():
    g, cluster = chain_at(0.35)
    alone = portfolio.judge_all(g, cluster, "etf")
    assert list(alone.candidates) == ["etf"] and alone.candidates["etf"].judged.profile is not None
    many = portfolio.judge_all(g, cluster, "pardnn")
    assert all(c.judged.profile is None for c in many.candidates.values() if c.judged is not None)
    assert all(c.judged.profile is None for c in portfolio.searched(Judging(g, cluster), {}).values())


def test_the_main_process_builds_the_candidates_no_worker_has_started(monkeypatch, tmp_path):
    import os
    log = tmp_path / "built"
    build = portfolio._build_and_judge

    def logged(judging, name, *args, **kwargs):
        with open(log, "a") as f:
            f.write(f"{name} {os.getpid()}\n")
        return build(judging, name, *args, **kwargs)
    g, cluster = chain_at(0.35)
    forked(monkeypatch, 2)
    monkeypatch.setattr(portfolio, "_build_and_judge", logged)
    chosen = portfolio.choose(g, cluster, "pardnn")
    built = [line.split() for line in log.read_text().splitlines()]
    names = [name for name, _ in built]
    assert sorted(names) == sorted(set(names)) == sorted(n for n in chosen.candidates if n != "step1")
    assert str(os.getpid()) in {pid for _, pid in built}                # some taken here
    assert len({pid for _, pid in built}) == 2                          # and some by the worker


def exact_fit_case():
    """6 nodes, 2 devices at 191 B, where a known placement fits but the greedy rounds
    get stuck (tests/test_repair.py)."""
    from pardnn.graph import CostGraph
    g = CostGraph.build(names=[f"n{i}" for i in range(6)], comp_us=[4, 3, 3, 2, 5, 3],
                        out_bytes=[42, 24, 7, 20, 41, 21], persist_bytes=[79, 66, 0, 31, 32, 3],
                        group=[0, 1, 0, 0, 2, 2], edge_src=["n0", "n1", "n2", "n2", "n3"],
                        edge_dst=["n5", "n2", "n3", "n5", "n5"], edge_bytes=[42, 24, 7, 7, 20])
    return g, parse_devices("cpu:2").with_options(memory=191, reserve=0)


def test_a_candidate_that_fits_only_with_the_local_search_is_kept(monkeypatch):
    from pardnn.repair import exhaustive
    g, cluster = exact_fit_case()
    monkeypatch.setattr(exhaustive, "MAX_PLACEMENTS", 0)           # as for a large graph
    chosen = portfolio.choose(g, cluster, "single")
    assert chosen.winner == "single" and chosen.candidates["single"]["feasible"]
    assert np.all(chosen.judged.profile.peak_bytes <= 191)


@pytest.mark.parametrize("held", ["single", "round-robin"])
def test_a_leader_refined_while_a_worker_still_builds_is_the_refinement_kept(monkeypatch, held):
    """tests/test_stages.py's test of the early refinement on a 150-node chain: Step 1
    ends while the one worker is held at candidate `held`; m-ETF, the fastest known,
    has Step 1 as it is for runner-up, so it is refined here at once, and that
    refinement is kept; the placement is that of a portfolio built in turn. Held at the
    last candidate, the worker tracks the leader's peaks; held before it (a candidate
    still queued), the peaks are tracked here."""
    g, cluster = spare(13)                  # m-ETF the fastest as built, Step 1 next
    inline = portfolio.choose(g, cluster, "pardnn")
    forked(monkeypatch, 2)
    fired, asked = hold_worker_at(monkeypatch, held)
    t0 = time.perf_counter()
    chosen = portfolio.choose(g, cluster, "pardnn", timings=(timings := {}))
    assert 0.0 < timings["refine_memory"] <= time.perf_counter() - t0
    assert list(fired[0][0]) == ["etf"] and fired[0][1] is not None
    assert chosen.winner == "etf" and chosen.refinement is fired[0][0]["etf"][1]
    assert asked == ([0] if held == "single" else [])
    # (the worker's lower bound is taken only if ready when the refinement ends: here, it may not be)
    assert chosen.step_bound in (None, step_lower_bound(g, cluster, exact_model=False))
    assert np.array_equal(chosen.judged.device, inline.judged.device) and makespans(chosen) == makespans(inline)
    assert np.array_equal(chosen.judged.peak_before, inline.judged.peak_before)

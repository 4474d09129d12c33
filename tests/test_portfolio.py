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

from helpers.training_chain import cluster_at
from tools.synth_graph import synth_graph


def chain_at(fraction, seed=0):
    """A 150-node training-like chain on 4 devices with `fraction` of its one-device peak each."""
    g = synth_graph(150, seed=seed, shape="chain")
    return g, cluster_at(g, 4, fraction)


def forked(monkeypatch, cpus):
    monkeypatch.setattr(workers, "PARALLEL_MIN_NODES", 0)
    monkeypatch.setattr(workers, "usable_cpus", lambda: cpus)


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
    chosen = portfolio.choose(g, cluster, "pardnn")
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

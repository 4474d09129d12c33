"""pardnn.pipeline.lanes on plain functions: where jobs run (here below
PARALLEL_MIN_NODES, else each in a forked process pinned to its share of the CPUs),
the answers in the order of the items whatever order they started in, and a job's
error, a lane that dies or an answer that does not pickle raised here. Fast enough
to run against each of its mutants (tools/mutation.py)."""

import os

import pytest

from pardnn.pipeline import lanes
from pardnn.pipeline.workers import PARALLEL_MIN_NODES

CPUS = sorted(os.sched_getaffinity(0))


def where(item):
    """(item, the process that ran it, the CPUs it may use)."""
    return item, os.getpid(), sorted(os.sched_getaffinity(0))


def two_lanes(monkeypatch):
    """Two lanes whatever the machine: both on the first CPU."""
    monkeypatch.setattr(lanes, "_shares", lambda jobs: [[CPUS[0]], [CPUS[0]]][:jobs])


def test_jobs_on_a_graph_below_the_parallel_size_run_here_in_order(monkeypatch):
    two_lanes(monkeypatch)
    answers = lanes.in_lanes(where, [3, 1, 2], PARALLEL_MIN_NODES - 1, first=[2, 1, 0])
    assert [a[0] for a in answers] == [3, 1, 2] and {a[1] for a in answers} == {os.getpid()}


def test_jobs_from_the_parallel_size_on_run_in_lanes_pinned_to_their_share(monkeypatch):
    two_lanes(monkeypatch)
    answers = lanes.in_lanes(where, [3, 1, 2], PARALLEL_MIN_NODES)
    assert [a[0] for a in answers] == [3, 1, 2]
    assert os.getpid() not in {a[1] for a in answers} and len({a[1] for a in answers}) == 3
    assert all(a[2] == [CPUS[0]] for a in answers)
    assert sorted(os.sched_getaffinity(0)) == CPUS                      # this process is not pinned


def test_one_lane_runs_the_jobs_here(monkeypatch):
    monkeypatch.setattr(lanes, "_shares", lambda jobs: [CPUS])
    assert {a[1] for a in lanes.in_lanes(where, [5, 6], 10**9)} == {os.getpid()}


def test_the_cpus_are_dealt_into_one_share_per_job_at_most():
    assert lanes._shares(1) == [CPUS]
    many = lanes._shares(len(CPUS) + 3)
    assert many == [[cpu] for cpu in CPUS]
    if len(CPUS) >= 2:
        assert lanes._shares(2) == [CPUS[0::2], CPUS[1::2]]
    assert lanes._shares(0) == []


def test_a_lane_starts_the_jobs_in_the_order_given(tmp_path):
    log = tmp_path / "started"

    def job(item):
        with open(log, "a") as f:
            f.write(f"{item}\n")
        return item * 10
    assert lanes._run(job, [0, 1, 2, 3], [2, 0, 3, 1], [[CPUS[0]]]) == [0, 10, 20, 30]
    assert log.read_text().split() == ["2", "0", "3", "1"]


def test_more_jobs_than_lanes_reuse_the_lanes(monkeypatch):
    two_lanes(monkeypatch)
    assert [a[0] for a in lanes.in_lanes(where, list(range(7)), 10**9, first=[6, 5, 4, 3, 2, 1, 0])] == \
        list(range(7))


def test_a_jobs_error_is_raised_here(monkeypatch):
    two_lanes(monkeypatch)

    def job(item):
        if item == 2:
            raise KeyError("two")
        return item
    with pytest.raises(KeyError, match="two"):
        lanes.in_lanes(job, [1, 2, 3], 10**9)


def test_a_lane_that_dies_or_cannot_send_its_answer_is_a_lane_died(monkeypatch):
    two_lanes(monkeypatch)
    with pytest.raises(lanes.LaneDied, match="ended without an answer"):
        lanes.in_lanes(lambda item: os._exit(3) if item else item, [0, 1], 10**9)
    with pytest.raises(lanes.LaneDied, match="sending a lane's answer back"):
        lanes.in_lanes(lambda item: (lambda: item), [0, 1], 10**9)


def test_without_affinity_the_cpus_are_counted(monkeypatch):
    monkeypatch.delattr(os, "sched_getaffinity")
    monkeypatch.setattr(os, "cpu_count", lambda: 3)
    assert lanes._shares(2) == [[0, 2], [1]]
    monkeypatch.setattr(os, "cpu_count", lambda: None)             # unknown: one CPU
    assert lanes._shares(3) == [[0]]


@pytest.mark.skipif(len(CPUS) < 2, reason="two lanes on different CPUs need two CPUs")
def test_the_jobs_take_the_shares_in_order():
    assert [a[2] for a in lanes._run(where, [0, 1], [0, 1], [[CPUS[0]], [CPUS[1]]])] == [[CPUS[0]], [CPUS[1]]]


def test_an_error_ends_the_other_lanes(monkeypatch):
    import multiprocessing
    import time
    two_lanes(monkeypatch)

    def job(item):
        if item:
            time.sleep(0.2)                                         # (the other lane has started by then)
            raise KeyError("one")
        time.sleep(60)
    before = set(multiprocessing.active_children())
    with pytest.raises(KeyError):
        lanes.in_lanes(job, [0, 1], 10**9)
    left = set(multiprocessing.active_children()) - before          # (the failed lane may still be exiting)
    deadline = time.monotonic() + 10.0
    while any(p.is_alive() for p in left) and time.monotonic() < deadline:
        time.sleep(0.05)
    alive = [p for p in left if p.is_alive()]
    for process in alive:
        process.kill()
    assert not alive                                                # the sleeping lane was ended

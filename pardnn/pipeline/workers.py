"""The portfolio's worker processes (pardnn.pipeline.portfolio): forked processes that
build candidates, refine a runner-up, track a candidate's peaks or find report.json's
lower bound while the main process works, and the in-process stand-in used where
there are none (small graphs, one CPU, no fork). Jobs return futures (`result`,
`done`); the stand-in runs each when its result is asked for.

Workers inherit the graph by fork rather than receive a copy: what they share is set
in `_SHARED` before the fork, and only a job's arguments and answer are pickled. A
shared flag per candidate, taken under a lock, makes each candidate built once,
whether by a worker or by the main process (`claim`).
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
from concurrent import futures
from concurrent.futures.process import BrokenProcessPool

from pardnn.pipeline.bounds import step_lower_bound
from pardnn.emulator.memory import track_memory
from pardnn.emulator.scheduler import simulate

PARALLEL_MIN_NODES = 20_000  # smaller graphs build their candidates in this process

_SHARED = {}    # what the forked workers inherit (never pickled to them)


@contextlib.contextmanager
def workers(judging, names, candidate, refine):
    """Worker processes for the candidates `names` of judging's graph and cluster: one
    fewer than the CPUs this process may use, none for graphs under PARALLEL_MIN_NODES
    (a fork costs more than they take) or on one CPU, when the stand-in (`Inline`)
    runs every job here in turn. `candidate(judging, name)` builds and judges one,
    `refine(judging, judged, deadline)` refines one within memory. Workers still
    running when the placement moves on are killed."""
    count = min(len(names), usable_cpus() - 1)
    forks = "fork" in multiprocessing.get_all_start_methods()
    if judging.graph.num_nodes < PARALLEL_MIN_NODES or count < 1 or not forks:
        yield Inline(judging, candidate, refine)
        return
    context = multiprocessing.get_context("fork")
    _SHARED.update(judging=judging, names=list(names), claims=context.Array("b", len(names)),
                   candidate=candidate, refine=refine)
    pool = futures.ProcessPoolExecutor(count, mp_context=context)
    try:
        yield Forked(pool)
    finally:
        processes = list((getattr(pool, "_processes", None) or {}).values())
        results = getattr(pool, "_result_queue", None)      # (shutdown forgets it)
        pool.shutdown(wait=False, cancel_futures=True)
        for process in processes:
            process.kill()
        for process in processes:
            process.join()
        _unblock(results)
        _SHARED.clear()


def _unblock(results):
    """After the workers are killed: closes this process's end of the pipe `results`
    through which they send their answers. A worker killed halfway through sending a
    large one (a candidate a time budget no longer waits for) leaves the pool's
    reading thread waiting for the rest; with no writer left it reads the end of the
    pipe instead, and the interpreter can exit (else it waits for that thread for ever)."""
    writer = getattr(results, "_writer", None)
    if writer is not None:
        writer.close()


def usable_cpus() -> int:
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def ready(job):
    """The job's answer if it has one now, else None: no wait, and no error (a worker
    that died, or failed in any way): the caller can find the answer itself."""
    if job is None or not job.done():
        return None
    try:
        return job.result(timeout=0)
    except Exception:       # any failure only means: find it yourself
        return None


def peaks_of(device, judging):
    """The emulated peak memory per device of placement `device`."""
    graph, cluster = judging.graph, judging.cluster
    return track_memory(graph, cluster, device, simulate(graph, cluster, device)).peak_bytes


def claimed(claims, index) -> bool:
    """Mark candidate `index` taken; True when this caller is the first to take it."""
    with claims.get_lock():
        first = not claims[index]
        claims[index] = 1
    return first


def _shared_candidate(name):
    """A worker's job: candidate `name`, or None when the main process claimed it first."""
    if not claimed(_SHARED["claims"], _SHARED["names"].index(name)):
        return None
    return _SHARED["candidate"](_SHARED["judging"], name)


def _shared_refine(judged, deadline):
    return _SHARED["refine"](_SHARED["judging"], judged, deadline)


def _shared_peaks(device):
    return peaks_of(device, _SHARED["judging"])


def _shared_bound():
    judging = _SHARED["judging"]
    return step_lower_bound(judging.graph, judging.cluster, exact_model=False)


class Forked:
    """Jobs run by worker processes; candidates each by the first to claim it."""

    parallel = True

    def __init__(self, pool):
        self.pool = pool

    def submit(self, name):
        return self._submit(_shared_candidate, name)

    def refine(self, judged, deadline):
        return self._submit(_shared_refine, judged, deadline)

    def peaks(self, device):
        return self._submit(_shared_peaks, device)

    def bound(self):
        """report.json's lower bound without the exact model's part
        (pardnn.pipeline.bounds.step_lower_bound): a StepLowerBound."""
        return self._submit(_shared_bound)

    def _submit(self, job, *args):
        """The job's future; once a worker has died the pool takes no more, and the job
        reports that death when asked for its result, as one that died running would."""
        try:
            return self.pool.submit(job, *args)
        except BrokenProcessPool as exc:
            return _Failed(exc)

    @staticmethod
    def claim(name) -> bool:
        """Take candidate `name` for this process if no worker has started it."""
        return claimed(_SHARED["claims"], _SHARED["names"].index(name))

    @staticmethod
    def started(name) -> bool:
        """Whether some process has taken candidate `name` (jobs queued after it wait less)."""
        claims = _SHARED["claims"]
        with claims.get_lock():
            return bool(claims[_SHARED["names"].index(name)])


class Inline:
    """Jobs run in this process, each when its result is asked for."""

    parallel = False

    def __init__(self, judging, candidate, refine):
        self.judging, self.candidate, self.refine_here = judging, candidate, refine

    def submit(self, name):
        return _Deferred(lambda: self.candidate(self.judging, name))

    def refine(self, judged, deadline):
        return _Deferred(lambda: self.refine_here(self.judging, judged, deadline))

    def peaks(self, device):
        return _Deferred(lambda: peaks_of(device, self.judging))

    @staticmethod
    def bound():
        return None             # the report finds it, as cheaply as a job here would

    @staticmethod
    def claim(name) -> bool:
        return False            # nothing runs elsewhere: every candidate is built when collected

    @staticmethod
    def started(name) -> bool:
        return False


class _Failed:
    """A job a broken pool refused: its result is the pool's error."""

    def __init__(self, error):
        self.error = error

    @staticmethod
    def done() -> bool:
        return True

    def result(self, timeout):
        raise self.error


class _Deferred:
    def __init__(self, build):
        self.build = build

    def result(self, timeout):
        return self.build()

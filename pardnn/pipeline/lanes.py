"""Whole jobs side by side, each in a forked process on its own share of the CPUs:
`pardnn capacity`'s device counts (pardnn.pipeline.capacity), one count per process.

Why: a count's work is mostly one job after another (the bisection tries one memory
at a time, each decided before the next is chosen), so one count keeps one CPU busy
while the others wait; different counts share nothing but the graph. On graphs of
workers.PARALLEL_MIN_NODES nodes or more (below, a fork costs more than it saves),
with fork and two CPUs or more, `in_lanes` runs one job per lane at a time: a lane is
a share of the CPUs this process may use, and its process is pinned to it
(os.sched_setaffinity), so the portfolio's own workers inside it
(pardnn.pipeline.workers, sized by the CPUs a process may use) stay within that share.

Jobs inherit the graph by fork; only each job's answer is pickled back. A job's
answer does not depend on which process ran it or when (a placement depends on
neither, pardnn.pipeline.portfolio), so the answers are those of running the jobs one
after another here, in any order; the order given (`first`) only balances the lanes.
"""

from __future__ import annotations

import multiprocessing
import os
from multiprocessing.connection import wait

from pardnn.base.progress import quiet, stage
from pardnn.pipeline.workers import PARALLEL_MIN_NODES


class LaneDied(RuntimeError):
    """A lane's process ended without an answer (killed, out of memory)."""


def in_lanes(job, items, nodes, first=None, message="working") -> list:
    """[job(item) for item in items]: in lanes (module docstring) on a graph of `nodes`
    nodes, else here one after another. `first`: the indices of `items` in the order
    to start them (the longest first balances the lanes best); default, as given. An
    error a job raises is raised here (the first to arrive), and the other lanes'
    processes are ended. `message`: the progress line shown while lanes run (a job
    run here shows its own)."""
    order = list(range(len(items))) if first is None else list(first)
    shares = _shares(len(items))
    if nodes < PARALLEL_MIN_NODES or len(shares) < 2:
        return [job(item) for item in items]
    with stage(message):
        return _run(job, items, order, shares)


def _run(job, items, order, shares) -> list:
    context = multiprocessing.get_context("fork")
    answers, running = {}, {}
    try:
        while order or running:
            while order and shares:
                i, share = order.pop(0), shares.pop(0)
                reader, writer = context.Pipe(duplex=False)
                process = context.Process(target=_lane, args=(job, items[i], share, writer))
                process.start()
                writer.close()
                running[reader] = (i, process, share)
            for reader in wait(list(running)):
                i, process, share = running.pop(reader)
                answers[i] = _answer(reader)
                reader.close()
                process.join()
                shares.append(share)
    finally:
        for reader, (_, process, _) in running.items():
            process.kill()
            process.join()
            reader.close()
    return [answers[i] for i in range(len(items))]


def _shares(jobs) -> list:
    """The lanes: this process's CPUs dealt into min(jobs, CPUs) shares; [] without
    fork (each job then runs here)."""
    if "fork" not in multiprocessing.get_all_start_methods():
        return []
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))
    lanes = min(jobs, len(cpus))
    return [cpus[i::lanes] for i in range(lanes)]


def _lane(job, item, share, writer):
    """A lane's process: pinned to its CPUs, quiet (no progress spinner beside the
    parent's), it sends back (True, answer) or (False, the error raised)."""
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, share)
    quiet()
    try:
        message = (True, job(item))
    except BaseException as exc:        # any error goes back to be raised there
        message = (False, exc)
    try:
        writer.send(message)
    except Exception as exc:            # an answer or error that does not pickle
        writer.send((False, LaneDied(f"{type(exc).__name__} sending a lane's answer back: {exc}")))
    writer.close()


def _answer(reader):
    try:
        ok, value = reader.recv()
    except EOFError:
        raise LaneDied("a lane's process ended without an answer (killed, or out of memory?)") from None
    if not ok:
        raise value
    return value

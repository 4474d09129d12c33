"""A portfolio whose forked worker is held at one candidate, for the tests of the early
refinement (tests/test_stages.py, tests/test_portfolio.py): Step 1 ends while the worker
builds candidate `held`, so the choice to refine the leader at once is made every time."""

import multiprocessing
import os

from pardnn.pipeline import portfolio, workers


def hold_worker_at(monkeypatch, held):
    """Patch the portfolio so that a worker process building candidate `held` waits until
    this process has refined early (or started a refinement), and Step 1 waits until the
    worker is there. Returns (fired, asked): what each early refinement returned, and,
    for each peaks job a worker was asked for, how many early refinements had run."""
    fork = multiprocessing.get_context("fork")
    reached, go, parent, fired, asked = fork.Event(), fork.Event(), os.getpid(), [], []
    build, first, early, refine, peaks = (portfolio._build_and_judge, portfolio._first, portfolio._refine_early,
                                          portfolio._refine, workers.Forked.peaks)

    def held_at(judging, name, timings=None):
        if os.getpid() != parent and name == held:
            reached.set()
            go.wait(120)
        return build(judging, name, timings)

    def first_then_wait(*args, **kwargs):
        out = first(*args, **kwargs)
        assert reached.wait(120)
        return out

    def recorded(*args):
        out = early(*args)
        fired.append(out)
        go.set()
        return out

    def released(*args):            # the worker may be asked for the peaks meanwhile
        go.set()
        return refine(*args)

    def counted(self, device):
        asked.append(len(fired))
        return peaks(self, device)
    monkeypatch.setattr(workers.Forked, "peaks", counted)
    monkeypatch.setattr(portfolio, "_build_and_judge", held_at)
    monkeypatch.setattr(portfolio, "_refine", released)
    monkeypatch.setattr(portfolio, "_first", first_then_wait)
    monkeypatch.setattr(portfolio, "_refine_early", recorded)
    return fired, asked

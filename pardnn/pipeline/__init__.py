"""The placement pipeline, one stage a module: load.py turns a PROFILE argument into a
CostGraph; choice.py holds the portfolio's rules (which candidates of
pardnn.placers.registry run, the finalists, the winner) and portfolio.py runs them
(in worker processes, workers.py, and under a --time-budget); judge.py repairs each
candidate for memory and emulates it; refine_memory.py refines the finalists within
memory; place.py runs the stages; report.py assembles report.json, whose lower bound
on the step bounds.py computes (`step_lower_bound`, which explain and capacity read
too); replicas.py estimates data parallelism across hosts.

Its public surface is modules, not names: `from pardnn.pipeline import place` then
`place.place(graph, cluster)` (a Placement and its Report), `load.load_cost_graph`,
`report.Report`, `place_dir.place_profile`, `bounds.step_lower_bound` (the step no
placement beats, with its parts). This file imports none of them, because the
stages import one another through the package (`from pardnn.pipeline import choice`)."""

__all__ = ["bounds", "load", "place", "place_dir", "report"]

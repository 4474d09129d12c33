"""The registry of placement algorithms behind `--algorithm`.

A placer is a function `place(graph, cluster, timings) -> np.ndarray` returning the
device index of every node. It must keep colocation groups whole and pinned nodes on
their device kind (see pardnn.graph.constraints) and may record its stage wall times in
`timings` (seconds, e.g. {"slicing": 0.4}). Modules are imported on first use so that
listing algorithms stays cheap.
"""

import importlib

from pardnn.errors import UserError

ALGORITHMS = {
    "pardnn": ("pardnn.placers.pardnn.step1:place",
               "ParDNN: Step 1 and memory-aware candidates (stages, m-ETF, min-cut; hosts first "
               "on several hosts), repaired, the two fastest refined within memory, the faster kept"),
    "pardnn-hier": ("pardnn.placers.hierarchical:place",
                    "hosts first, then ParDNN within each host (or one host alone, if faster)"),
    "round-robin": ("pardnn.placers.baselines.round_robin:place",
                    "colocation groups dealt to devices in topological order"),
    "single": ("pardnn.placers.baselines.single:place", "everything on device 0, TensorFlow's default"),
    "topo": ("pardnn.placers.baselines.topo:place", "Baechi m-TOPO: fill devices in topological order up to a memory share"),
    "etf": ("pardnn.placers.baselines.etf:place", "Baechi m-ETF: earliest-task-first list scheduling with memory tracking"),
    "heft": ("pardnn.placers.baselines.heft:place", "HEFT: upward rank, earliest finish time with insertion"),
    "linear": ("pardnn.placers.baselines.linear:place", "linear clustering + Guided Load Balancing (thesis 6.4.2)"),
    "metis": ("pardnn.placers.baselines.metis_cut:place", "METIS balanced min-cut of the undirected graph (pymetis)"),
}

# Portfolios build, repair and judge several candidates themselves and return a
# pardnn.placers.pardnn.candidates.Chosen. `get` still gives their plain placer (for
# pardnn: Step 1 alone), which pardnn-hier uses within each host.
PORTFOLIOS = {"pardnn": "pardnn.placers.pardnn.candidates:choose"}


def names() -> list:
    return list(ALGORITHMS)


def portfolio(name: str):
    """The portfolio function for `name`, or None when it is a plain placer."""
    return _load(PORTFOLIOS[name]) if name in PORTFOLIOS else None


def get(name: str):
    """The placer function for `name`; UserError listing valid names otherwise."""
    if name not in ALGORITHMS:
        raise UserError(f"--algorithm: unknown algorithm {name!r} (choose from {', '.join(names())})")
    return _load(ALGORITHMS[name][0])


def _load(target: str):
    module, func = target.split(":")
    return getattr(importlib.import_module(module), func)

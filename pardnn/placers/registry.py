"""The one table of placers: for each, its function, what it does, and its part in
`--algorithm pardnn`'s portfolio (run by pardnn.pipeline.portfolio).

A placer is a function `place(graph, cluster, timings) -> np.ndarray` returning the
device index of every node. It must keep colocation groups whole and pinned nodes on
their device kind (see pardnn.graph.constraints) and may record its stage wall times in
`timings` (seconds, e.g. {"slicing": 0.4}). A placer imports no emulator: one that
judges trial placements itself takes the emulator as the keyword `emulate`
(`emulates=True` below), and the pipeline lends it pardnn.emulator.trial.emulate.

Every algorithm is a portfolio that the pipeline builds, repairs and judges alike:
`--algorithm pardnn` the candidates with a role below, any other name the one placer
it names. Adding a placer, and making it a candidate, is one entry in PLACERS.
Modules are imported on first use, so that listing algorithms stays cheap.
"""

from __future__ import annotations

import importlib
from typing import NamedTuple

from pardnn.base.errors import UserError

PORTFOLIO = "pardnn"
PORTFOLIO_DESCRIPTION = ("ParDNN: Step 1 and memory-aware candidates (stages, m-ETF, min-cut; hosts first "
                         "on several hosts), repaired, the two fastest refined within memory, the faster kept")

# Roles in the portfolio. FIRST is built in the pipeline's own process while worker
# processes build the others; CORE always runs; HOSTS is core on clusters of several
# hosts; EXTRA runs on small graphs, or when no core candidate fits.
FIRST, CORE, HOSTS, EXTRA = "first", "core", "hosts", "extra"


class Placer(NamedTuple):
    function: str               # "module:function", the place(graph, cluster, timings) above
    description: str
    algorithm: str | None       # its name under --algorithm; None when only a candidate
    role: str | None            # in the portfolio (FIRST, CORE, HOSTS, EXTRA); None: not a candidate
    build_rank: int = 0         # how slow it is to build among candidates, slowest highest: workers
    #                             take the slowest first, so that the main process, done with
    #                             the FIRST one, takes the quick ones still waiting at the end
    emulates: bool = False      # takes the emulator as `emulate`
    applies: str | None = None  # "module:function" (graph, cluster) -> bool: whether it runs
    #                             there as a candidate (None: everywhere its role runs)
    reads_memory: bool = False  # its placement depends on the devices' memory (else the same
    #                             at any memory: `pardnn capacity` builds it once per count)


# Candidate name -> placer, in the portfolio's order: of two equally fast, the earlier wins.
PLACERS = {
    "step1": Placer("pardnn.placers.step1:place",
                    "ParDNN Step 1 (thesis §4.1.1): slicing, mapping, refinement; memory ignored",
                    None, FIRST, emulates=True),
    "stages": Placer("pardnn.placers.stages:place",
                     "contiguous stages of the topological order, cut for memory (after RaNNC, Piper)",
                     None, CORE, 5, reads_memory=True),
    "etf": Placer("pardnn.placers.etf:place",
                  "Baechi m-ETF: earliest-task-first list scheduling with memory tracking", "etf", CORE, 8,
                  reads_memory=True),
    "heft": Placer("pardnn.placers.heft:place",
                   "HEFT: upward rank, earliest finish time with insertion", "heft", CORE, 7),
    "metis": Placer("pardnn.placers.metis_cut:place",
                    "METIS balanced min-cut of the undirected graph (pymetis)", "metis", CORE, 4),
    "hier": Placer("pardnn.placers.hierarchical:place",
                   "hosts first, then ParDNN within each host (or one host alone, if faster)",
                   "pardnn-hier", HOSTS, 9, emulates=True, reads_memory=True),
    "exact": Placer("pardnn.placers.exact:place",
                    "CP-SAT model of placement and schedule together, on small graphs (docs/bounds.md)",
                    None, CORE, 10, applies="pardnn.placers.exact:applies"),
    "linear": Placer("pardnn.placers.linear:place",
                     "linear clustering + Guided Load Balancing (thesis 6.4.2)", "linear", EXTRA, 6),
    "topo": Placer("pardnn.placers.topo:place",
                   "Baechi m-TOPO: fill devices in topological order up to a memory share", "topo", EXTRA, 3,
                   reads_memory=True),
    "round-robin": Placer("pardnn.placers.round_robin:place",
                          "colocation groups dealt to devices in topological order", "round-robin", EXTRA, 2),
    "single": Placer("pardnn.placers.single:place",
                     "everything on device 0, TensorFlow's default", "single", EXTRA, 1),
}


def names() -> list:
    """The names `--algorithm` accepts: the portfolio first."""
    return [PORTFOLIO] + [p.algorithm for p in PLACERS.values() if p.algorithm]


def candidates(algorithm: str) -> list:
    """The candidate names `algorithm` may run, in portfolio order; UserError listing
    the valid names when there is no such algorithm."""
    if algorithm == PORTFOLIO:
        return [name for name, p in PLACERS.items() if p.role is not None]
    found = [name for name, p in PLACERS.items() if p.algorithm == algorithm]
    if not found:
        raise UserError(f"--algorithm: unknown algorithm {algorithm!r} (choose from {', '.join(names())})")
    return found


def get(name: str):
    """The place function of placer `name` (a key of PLACERS)."""
    return _load(PLACERS[name].function)


def applies(name: str, graph, cluster) -> bool:
    """Whether placer `name` runs as a candidate on this graph and cluster."""
    test = PLACERS[name].applies
    return test is None or bool(_load(test)(graph, cluster))


def _load(target: str):
    module, func = target.split(":")
    return getattr(importlib.import_module(module), func)

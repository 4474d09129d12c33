"""The one table of placers: for each, its function, what it does, and its part in
`--algorithm pardnn`'s portfolio (run by pardnn.pipeline.portfolio).

A placer is a function `place(graph, cluster, timings) -> np.ndarray` returning the
device index of every node. It must keep colocation groups whole and pinned nodes on
their device kind (see pardnn.graph.constraints) and may record its stage wall times in
`timings` (seconds, e.g. {"slicing": 0.4}). A placer imports no emulator: one that
judges trial placements itself takes the emulator as the keyword `emulate`
(`emulates=True` below), and the pipeline lends it pardnn.emulator.trial.emulate.

Devices of different speeds (the host beside GPUs; pardnn.graph.op_rates): a placer
whose cost model times each op on each device (`speeds=RATES`) places on the whole
cluster; one that costs every device alike (`FASTEST`) places on the fastest devices
alone, which are alike (`Cluster.fastest`), given the graph's times at their rates and
those devices at rate 1, and the memory repair and refinement within memory may then
use the others (`run`); one that cannot do either (`speeds=None`) is left out of the
portfolio there and refused by name. The same holds where every device runs at one
rate other than 1. On a cluster whose rates are all 1 every placer runs as it is.

Every algorithm is a portfolio that the pipeline builds, repairs and judges alike:
`--algorithm pardnn` the candidates with a role below, any other name the one placer
it names. Adding a placer, and making it a candidate, is one entry in PLACERS.
Modules are imported on first use, so that listing algorithms stays cheap.
"""

from __future__ import annotations

import importlib
from dataclasses import replace
from typing import NamedTuple

import numpy as np

from pardnn.base.errors import UserError
from pardnn.graph.constraints import onto_allowed
from pardnn.graph.op_rates import at_rates

PORTFOLIO = "pardnn"
PORTFOLIO_DESCRIPTION = ("ParDNN: Step 1 and memory-aware candidates (stages, m-ETF, min-cut; hosts first "
                         "on several hosts), repaired, the two fastest refined within memory, the faster kept")

# Roles in the portfolio. FIRST is built in the pipeline's own process while worker
# processes build the others; CORE always runs; HOSTS is core on clusters of several
# hosts; EXTRA runs on small graphs, or when no core candidate fits.
FIRST, CORE, HOSTS, EXTRA = "first", "core", "hosts", "extra"
# How a placer meets devices of different speeds (module docstring).
RATES, FASTEST = "rates", "fastest"


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
    speeds: str | None = FASTEST    # RATES, FASTEST or None: on devices of different speeds
    refines_itself: bool = False    # it refines its placement by emulated trials (Step 1): the
    #                                 portfolio refines it again only when its repair moved nodes
    #                                 (pardnn.pipeline.choice.refinable)
    schedule: str | None = None     # the order it runs a step of micro-batches in, by name
    #                                 (pardnn.pipeline.schedule; None: the fastest that fits)
    detailed: str | None = None     # "module:function" (graph, cluster, timings, *, emulate) giving
    #                                 its placement `.device` with its emulation `.schedule` and
    #                                 what it returned `.output` (report.json's step1_output): how
    #                                 the portfolio builds it first on devices at rate 1


# Candidate name -> placer, in the portfolio's order: of two equally fast, the earlier wins.
PLACERS = {
    "step1": Placer("pardnn.placers.step1:place",
                    "ParDNN Step 1 (thesis §4.1.1): slicing, mapping, refinement; memory ignored",
                    None, FIRST, emulates=True, refines_itself=True, detailed="pardnn.placers.step1:partition"),
    "stages": Placer("pardnn.placers.stages:place",
                     "contiguous stages of the topological order, cut for memory (after RaNNC, Piper)",
                     None, CORE, 5, reads_memory=True),
    "stages-live": Placer("pardnn.placers.stages:place_at_live_peak",
                          "the stage partition folded where live tensors peak, the last stage taking "
                          "the rest when none fit", None, CORE, 5, reads_memory=True),
    "etf": Placer("pardnn.placers.etf:place",
                  "Baechi m-ETF: earliest-task-first list scheduling with memory tracking", "etf", CORE, 8,
                  reads_memory=True, speeds=RATES),
    "heft": Placer("pardnn.placers.heft:place",
                   "HEFT: upward rank, earliest finish time with insertion", "heft", CORE, 7, speeds=RATES),
    "etf-fastest": Placer("pardnn.placers.etf:place", "m-ETF on the fastest devices alone (devices of "
                          "different speeds only: the host left to the repair)", None, CORE, 8,
                          applies="pardnn.placers.registry:speeds_differ", reads_memory=True),
    "heft-fastest": Placer("pardnn.placers.heft:place", "HEFT on the fastest devices alone (devices of "
                           "different speeds only)", None, CORE, 7, applies="pardnn.placers.registry:speeds_differ"),
    "metis": Placer("pardnn.placers.metis_cut:place",
                    "METIS balanced min-cut of the undirected graph (pymetis)", "metis", CORE, 4),
    "hier": Placer("pardnn.placers.hierarchical:place",
                   "hosts first, then ParDNN within each host (or one host alone, if faster)",
                   "pardnn-hier", HOSTS, 9, emulates=True, reads_memory=True),
    "exact": Placer("pardnn.placers.exact:place",
                    "CP-SAT model of placement and schedule together, on small graphs (docs/bounds.md)",
                    None, CORE, 10, applies="pardnn.placers.exact:applies", speeds=None),
    "linear": Placer("pardnn.placers.linear:place",
                     "linear clustering + Guided Load Balancing (thesis 6.4.2)", "linear", EXTRA, 6),
    "topo": Placer("pardnn.placers.topo:place",
                   "Baechi m-TOPO: fill devices in topological order up to a memory share", "topo", EXTRA, 3,
                   reads_memory=True),
    "round-robin": Placer("pardnn.placers.round_robin:place",
                          "colocation groups dealt to devices in topological order", "round-robin", EXTRA, 2),
    "gpipe": Placer("pardnn.placers.pipeline_stages:gpipe",
                    "GPipe: K stages of equal forward-op counts, micro-batches in TF's order (a baseline)",
                    "gpipe", None, 1, schedule="fifo"),
    "rannc": Placer("pardnn.placers.pipeline_stages:rannc",
                    "RaNNC-style: K contiguous stages of equal time, micro-batches 1F1B (a baseline)",
                    "rannc", None, 1, schedule="early-micro-batch"),
    "single": Placer("pardnn.placers.single:place",
                     "everything on device 0, TensorFlow's default", "single", EXTRA, 1, speeds=RATES),
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


def schedule_of(algorithm: str) -> str | None:
    """The order `--algorithm NAME` runs a step of micro-batches in, if its placer has one."""
    found = [p.schedule for p in PLACERS.values() if p.algorithm == algorithm and p.schedule]
    return found[0] if found else None


def get(name: str):
    """The place function of placer `name` (a key of PLACERS)."""
    return _load(PLACERS[name].function)


def detailed(name: str):
    """The `detailed` function of placer `name`, or None when it has none."""
    target = PLACERS[name].detailed
    return None if target is None else _load(target)


def applies(name: str, graph, cluster) -> bool:
    """Whether placer `name` runs as a candidate on this graph and cluster: not on
    devices of different speeds when it can place on none (`speeds=None`)."""
    if not cluster.uniform and PLACERS[name].speeds is None:
        return False
    test = PLACERS[name].applies
    return test is None or bool(_load(test)(graph, cluster))


def speeds_differ(graph, cluster) -> bool:
    """The `applies` test of the candidates that exist only for devices of different
    speeds: m-ETF and HEFT, which may use every device, also run on the fastest devices
    alone, so that the portfolio holds the placement without the slower ones as well."""
    return bool(cluster.mixed)


def run(name: str, graph, cluster, timings=None, **lent) -> np.ndarray:
    """Placer `name`'s placement of `graph` on `cluster` (int per node), `lent` its
    keywords (`emulate`): on devices of different speeds, by its `speeds` (module
    docstring); UserError for one that cannot place there."""
    entry, place = PLACERS[name], get(name)
    if cluster.uniform or entry.speeds == RATES:
        return place(graph, cluster, timings, **lent)
    if entry.speeds is None:
        raise UserError(f"--algorithm: {entry.algorithm or name} gives each op one time and cannot place on "
                        f"devices with rates ({cluster.preset or 'the cluster'}); choose another")
    return on_fastest(graph, cluster, lambda g, c: place(g, c, timings, **lent))


def on_fastest(graph, cluster, place) -> np.ndarray:
    """`place(graph, cluster)` run on the cluster's fastest devices, given the graph's
    times at their rates and those devices at rate 1 (so that an emulation lent to the
    placer scales nothing twice), mapped back to this cluster's device indices (int32);
    a group pinned to a kind those devices lack goes to the first device of its kind."""
    fastest, index = cluster.fastest()
    first = fastest.devices[0]
    alike = replace(fastest, devices=tuple(replace(d, compute_rate=1.0, memory_rate=1.0) for d in fastest.devices))
    device = index[np.asarray(place(at_rates(graph, first.compute_rate, first.memory_rate), alike), np.int64)]
    return onto_allowed(graph, cluster, device)


def _load(target: str):
    module, func = target.split(":")
    return getattr(importlib.import_module(module), func)

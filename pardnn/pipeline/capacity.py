"""How many devices a graph needs and how much memory each: `pardnn capacity`
(docs/capacity.md).

For each device count k (the first k devices of the cluster), the least memory per
device at which `algorithm` fits the graph is bisected between the least-memory bound
(pardnn.repair.least_memory: nothing fits below it) and a memory at which it was seen
to fit, until the bracket is within TOLERANCE of its top. Each memory tried asks what
decides whether `pardnn place --memory M` succeeds (`Feasibility`: some candidate of
the portfolio fits after its repair), without refining; the least memory found is then
placed exactly as `pardnn place --memory M` would (pardnn.pipeline.place.place), as is
the cluster's own memory (the step the user gets there). Where no candidate fits as
TF's executor orders the step, a memory fits too when one does with an order that
lowers the peak (pardnn.pipeline.order_lever), which the placement there then
carries; it is tried only then, so a memory that fits without it is placed as
before. The search counts memories tried, not seconds: the same inputs give the
same answer on any machine.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from pardnn.emulator.memory import track_memory
from pardnn.emulator.scheduler import simulate
from pardnn.base.errors import UserError
from pardnn.graph.node_memory import resident_bytes
from pardnn.graph.averaging import averaged_tensors
from pardnn.hardware.hosts import accelerators, counted_devices, first_devices, replica_devices
from pardnn.pipeline.replicas import estimate
from pardnn.pipeline.judge import Judging, fits_with_search, judge
from pardnn.pipeline.lanes import in_lanes
from pardnn.pipeline.bounds import step_lower_bound
from pardnn.pipeline.order_lever import on_graph, ordered_graphs
from pardnn.pipeline.place import run_placement
from pardnn.pipeline.report import placement_report
from pardnn.pipeline import choice
from pardnn.pipeline.portfolio import build, judge_all
from pardnn.placers import registry
from pardnn.base.progress import stage
from pardnn.repair.least_memory import least_memory_on
from pardnn.repair.working_sets import group_resident
from pardnn.base.units import format_size

TOLERANCE = 0.01        # the bisection stops when its bracket is within this share of its top,
NEAR_BOUND = 0.02       # or its top within this share of the bound
ENDGAME = 3             # within this many TOLERANCEs, the next memory is one whose outcome may end it


@dataclass
class Fit:
    """One placement that fits, and the memory per device it was placed with."""

    memory: int                 # bytes per device, the reserve included (as --memory)
    placement: object           # pardnn.io.placement.Placement
    report: object              # its report.json (pardnn.pipeline.report.Report)
    graph: object = None        # the graph placed when a lever made one (recomputed copies, second reads), else None


@dataclass
class Row:
    """One device count: the least memory pardnn fits in, and the step at the cluster's memory."""

    devices: int                # the count: its devices, beside the host tier when the cluster has one
    bound: object               # repair.least_memory.LeastMemory for this count (beside its host tier)
    step_bound: object          # pipeline.bounds.StepLowerBound: no placement's step on these devices is shorter
    least: Fit                  # the placement at the least memory found
    at_memory: Fit | None       # the placement at the cluster's own memory, None when none fits
    placements: int             # placements run for this row, as pardnn place runs them
    checks: int                 # memories tried by the bisection (Feasibility.fits)
    least_recomputing: Fit | None = None    # with recompute "on": the least memory found recomputing, if below `least`

    def fields(self, one_device_us) -> dict:
        """capacity.json's entry for this row (docs/capacity.md)."""
        doc = {"devices": self.devices,
               "least_memory_bytes": self.least.memory,
               "least_memory_bound_bytes": _memory(self.bound.bytes, self.least.placement.cluster.reserve),
               "bound": self.bound.fields(),
               "step_us_at_least_memory": self.least.report.makespan_us,
               "step_lower_bound_us": self.step_bound.us,
               "fits_at_memory": self.at_memory is not None,
               "placements": self.placements, "memories_tried": self.checks}
        order = self.least.placement.order
        if order is not None and len(order):        # the order lever (pardnn.pipeline.order_lever)
            doc.update({"order_at_least_memory": self.least.placement.schedule_name,
                        "control_edges_at_least_memory": len(order)})
        if self.least_recomputing is not None:     # pardnn.pipeline.recompute, below the least without it
            fit = self.least_recomputing
            doc.update({"least_memory_recomputing_bytes": fit.memory,
                        "least_memory_recomputing_bound_bytes": _memory(self.bound.recomputing().bytes,
                                                                        fit.placement.cluster.reserve),
                        "step_us_at_least_memory_recomputing": fit.report.makespan_us,
                        "recompute_at_least_memory": fit.report.recompute})
        if self.at_memory is not None:
            step = self.at_memory.report.makespan_us
            doc.update({"step_us_at_memory": step, "speedup_at_memory": one_device_us / step if step else None})
            if self.at_memory.report.recompute is not None:     # recomputed there (pardnn.pipeline.recompute)
                doc["recompute_at_memory"] = self.at_memory.report.recompute
            if self.at_memory.report.host_fetch is not None:    # weights fetched (pardnn.pipeline.host_fetch)
                doc["host_fetch_at_memory"] = self.at_memory.report.host_fetch
            if self.at_memory.report.schedule is not None:     # a step of micro-batches: its order there
                doc.update({"schedule_at_memory": self.at_memory.report.schedule,
                            "bubble_at_memory": self.at_memory.report.bubble})
        return doc


def check_devices(cluster, flag="--devices") -> None:
    """UserError for a cluster of one device: there are no counts to compare."""
    if cluster.num_devices < 2:
        raise UserError(f"{flag}: capacity compares device counts, and this cluster has one device; "
                        f"name a preset or cluster of several (e.g. dgx-h100 or gpu:8)")


def check_groups(graph, cluster, flag="--devices") -> None:
    """UserError when a colocation group holds more than every device's usable memory:
    no count fits it."""
    res = group_resident(graph)
    if len(res) and int(res.max()) > int(cluster.capacity.max()):
        g = int(np.argmax(res))
        members = graph.group_members(g)
        name = graph.names[members[np.argmax(resident_bytes(graph)[members])]]
        raise UserError(f"{flag}: the colocation group of {name!r} ({len(members)} nodes) holds "
                        f"{format_size(int(res[g]))}, more than the largest device's "
                        f"{format_size(int(cluster.capacity.max()))} usable (memory minus the reserve)")


def capacity(graph, cluster, counts, algorithm="pardnn", recompute="auto") -> list:
    """A Row per device count in `counts` (each at most the cluster's device count)."""
    return [row for row, _ in count_rows(graph, cluster, counts, algorithm, recompute=recompute)]


def replicas_at_memory(graph, cluster, row, samples=None) -> dict | None:
    """On a cluster of one host whose K devices a row of k < K devices divides (pardnn.
    hardware.hosts: K/k groups of k), the row's placement at the cluster's memory as
    K/k data-parallel replicas (`pardnn place --replicas K/k`): their emulated step, the
    all-reduce included (pardnn.pipeline.replicas.estimate), and with the profile's
    batch `samples` (one replica's) the samples per step and time per sample. None when
    it does not apply: no fit there, another count, several hosts or a host tier, or a
    graph whose updates read no data (nothing to average)."""
    k, fit = row.devices, row.at_memory
    if fit is None or k >= cluster.num_devices or cluster.num_devices % k:
        return None
    count = cluster.num_devices // k
    placed = fit.graph or graph
    try:
        replica_devices(cluster, count)
    except UserError:
        return None
    if averaged_tensors(placed).num_tensors == 0:
        return None
    block = estimate(placed, fit.placement.device, cluster, count, fit.report.makespan_us, fit.placement.order)
    out = {"count": count, "devices_per_replica": k, "step_time_us": block["step_time_us"],
           "allreduce_bytes": block["allreduce_bytes"]}
    if samples:
        out.update(samples_per_step=count * samples, time_per_sample_us=block["step_time_us"] / (count * samples))
    return out


def count_rows(graph, cluster, counts, algorithm="pardnn", then=None, recompute="auto", orders=True) -> list:
    """(Row, then(row)) per device count in `counts`: on large graphs, counts side by
    side (pardnn.pipeline.lanes), the largest first. `then(row)` (None: nothing) runs
    where and as soon as the row is found (`pardnn capacity -o` writes its placed dir
    there, while other rows are still being found). `recompute`, `orders`: as `count_row`'s."""
    def row_then(k):
        row = count_row(graph, counted_devices(cluster, k), algorithm, orders, recompute=recompute)
        return row, None if then is None else then(row)
    largest_first = sorted(range(len(counts)), key=lambda i: -counts[i])
    return in_lanes(row_then, list(counts), graph.num_nodes, largest_first,
                    f"finding the least memory on {len(counts)} device counts")


def count_row(graph, cluster, algorithm, orders=True, recompute="auto") -> Row:
    """The Row of `cluster` (all its devices): the least memory bisected with
    `Feasibility`, then placed as `pardnn place --memory` would; and the placement at
    the cluster's own memory. `orders`: a memory where nothing fits in TF's own order
    may fit with an order the placement carries (pardnn.pipeline.order_lever).
    `recompute`: "auto", recomputation only at the cluster's memory, when nothing
    fits there without it; "on", also the least memory with recomputation, bisected
    below the least without it (`_least_recomputing`); "off", never."""
    k, reserve = cluster.num_devices, cluster.reserve
    bound, step_bound = least_memory_on(graph, cluster), step_lower_bound(graph, cluster)
    memory = own_memory(cluster)
    feasible = Feasibility(graph, cluster, algorithm, orders)
    placed = [0]

    def full(m, judged=None, recompute=False):
        placed[0] += 1
        with stage(f"placing on {k} devices with {format_size(m)} each"):
            fit = _placed(graph, cluster, algorithm, m, judged)
            for ordered, check in feasible.ordered() if fit is None else ():
                fit = _placed(ordered.graph, cluster, algorithm, m,
                              check.judged if check.judged_memory == m else None)
                if fit is not None:
                    return Fit(m, on_graph(graph, ordered, fit.placement), fit.report)
            if fit is None and recompute:       # the devices' own memory: as `pardnn place` there
                fit = _placed(graph, cluster, algorithm, m, recompute="on")
        return fit

    def row(least, at_memory, checks):
        below = _least_recomputing(graph, cluster, algorithm, bound, least.memory) if recompute == "on" else None
        return Row(accelerators(cluster), bound, step_bound, least, at_memory,
                   placed[0] + (below[1] if below else 0), checks, below[0] if below else None)

    at_own = recompute != "off"
    if k == 1:                                      # one placement: its peak is the answer
        least = full(_memory(_one_device_peak(graph, cluster), reserve))
        return row(least, full(memory, recompute=at_own), 0)
    low = _memory(bound.bytes, reserve)             # nothing fits below it
    feasible.complete_at_most = _near(low)
    at_memory = full(memory, recompute=at_own) if memory >= _memory(bound.recomputing().bytes, reserve) else None
    top = _fitting_top(graph, cluster, at_memory, low, feasible)
    least_memory_found = _bisect(low, top, feasible.fits, feasible.fits_as_judged)
    judged = feasible.judged if feasible.judged is not None and feasible.judged_memory == least_memory_found else None
    least = (at_memory if at_memory is not None and least_memory_found == memory else
             full(least_memory_found, judged))
    if least is None:
        raise RuntimeError(f"{algorithm} found a fit at {format_size(least_memory_found)} on {k} devices "
                           f"and then did not place there")
    return row(least, at_memory, feasible.checks)


def _least_recomputing(graph, cluster, algorithm, bound, top):
    """(Fit, placements run) at the least memory at which a placement that recomputes
    fits (`pardnn place --recompute on --memory`), bisected as the least memory is
    between the bounds that hold whatever is recomputed and `top`, the least memory
    found without recomputing; None when none fits below `top`."""
    low = _memory(bound.recomputing().bytes, cluster.reserve)
    if low >= top:
        return None
    found = {}

    def fits(m):
        with stage(f"placing on {cluster.num_devices} devices with {format_size(m)} each, recomputing"):
            found[m] = _placed(graph, cluster, algorithm, m, recompute="on")
        return found[m] is not None
    least = _bisect(low, top, fits)
    return (found[least], len(found)) if least < top else None


def own_memory(cluster) -> int:
    """The devices' own memory a row places at: the largest, beside a host tier the
    largest of the others (`--memory` sets theirs; the host tier keeps its own)."""
    others = [d.memory for d in cluster.devices if not d.host_tier]
    return int(max(others)) if others else int(cluster.memory.max())


def _placed(graph, cluster, algorithm, m, judged=None, recompute="off"):
    """The Fit of `pardnn place --memory m` (`judged`: its candidates judged there
    already) without its levers (the callers try them), or with `recompute` "on" the
    placement of a recomputed graph; None when nothing fits."""
    try:
        at = cluster.with_options(memory=m) if judged is None else judged.cluster
        placed = run_placement(graph, at, algorithm, judged=judged, recompute=recompute, order="off")
    except UserError:
        return None
    return Fit(m, placed.placement, placement_report(placed.graph, placed),
               None if placed.graph is graph else placed.graph)


class Feasibility:
    """Whether `algorithm` fits at a memory per device, as `pardnn place` decides it
    from the candidates it builds from the start (pardnn.pipeline.choice.roles: the
    first and those beside it): some of them, built and repaired, fits; when none does,
    the two that came closest, with the repair's local search, as the portfolio does
    last (choice.closest_stuck).
    Refinement within memory keeps a fit, so it is left out; so are the EXTRA
    candidates that `pardnn place` tries on large graphs (choice.EXTRAS_MAX_NODES nodes
    or more) only when none fits (each a long repair that rarely fits there): a fit
    found here is one `pardnn place` finds too.

    Above `complete_at_most` bytes the first candidate that fits ends the check:
    placers that read no memory (registry.Placer.reads_memory) are built once, the
    candidate that fitted last is tried first (`_rank`: the order changes only the
    work, not the answer). At or below it (the bisection stops at
    the first fit there) every candidate is built and judged as `pardnn place` judges
    them (portfolio.judge_all, in worker processes on large graphs), and when one fits
    they are kept (`judged`, at `judged_memory`): the placement there takes them as
    they are.

    With `orders`, a memory at which none fits still fits when some order of
    pardnn.pipeline.order_lever fits (`ordered`: a Feasibility of each ordered graph,
    without orders, made when first needed)."""

    def __init__(self, graph, cluster, algorithm, orders=False):
        self.graph, self.cluster, self.algorithm = graph, cluster, algorithm
        self.orders, self._ordered = orders, None
        roles = choice.roles(algorithm, graph, cluster)
        self.names = [n for n in roles.order if n == roles.first or n in roles.beside]
        self.built, self.last, self.checks = {}, None, 0
        self.failed = {}            # name -> the most memory at which its repair did not fit
        self.complete_at_most = -1
        self.judged = self.judged_memory = None

    def fits(self, memory) -> bool:
        self.checks += 1
        if self._fits_as_is(memory):
            return True
        return any(check.fits(memory) for _, check in self.ordered())

    def fits_as_judged(self, memory) -> bool:
        """`fits` at a memory at or below `complete_at_most` without the repair's local
        search and the orders: every candidate judged there as `pardnn place` judges
        them first (kept when one fits). A True is a fit `pardnn place` finds; a False
        proves nothing. The bisection's last try, at the bound, kept to this cost."""
        self.checks += 1
        cluster = self.cluster.with_options(memory=memory)
        with stage(f"trying {format_size(memory)} per device on {cluster.num_devices} devices"):
            return self._all_fit(memory, cluster, search=False)

    def ordered(self) -> list:
        """[(order_lever.Ordered, its Feasibility)] to try when none fits as is; [] without `orders`."""
        if not self.orders:
            return []
        if self._ordered is None:
            self._ordered = [(o, Feasibility(o.graph, self.cluster, self.algorithm))
                             for o in ordered_graphs(self.graph)]
        for _, check in self._ordered:
            check.complete_at_most = self.complete_at_most
        return self._ordered

    def _fits_as_is(self, memory) -> bool:
        cluster = self.cluster.with_options(memory=memory)
        with stage(f"trying {format_size(memory)} per device on {cluster.num_devices} devices"):
            if memory <= self.complete_at_most:
                return self._all_fit(memory, cluster)
            judging, errors = Judging(self.graph, cluster), {}
            for name in self.names:
                if not registry.PLACERS[name].reads_memory:
                    self._built(name, cluster)
            for name in sorted(self.names, key=lambda n: self._rank(n, memory, cluster)):
                errors[name] = self._error(name, cluster, judging)
                if errors[name] is None:
                    self.last = name
                    return True
                self.failed[name] = max(self.failed.get(name, -1), memory)
            return self._searched(cluster, {n: errors[n] for n in self.names},
                                  lambda n: self.built[n].device if n in self.built else None)

    def _rank(self, name, memory, cluster) -> tuple:
        """Where candidate `name` comes in a first-fit check at `memory` (the earlier,
        the likelier to fit): the one that fitted last; then those that did not fail
        at a larger memory before those that did; among them, those built already
        (placers that read no memory, built once), the least over capacity before any
        repair first (the repair has the least to move); the rest as listed."""
        built = self.built.get(name)
        over = 0 if built is None else int(np.maximum(built.peaks - cluster.capacity, 0).sum())
        return name != self.last, self.failed.get(name, -1) > memory, built is None, over

    def _all_fit(self, memory, cluster, search=True) -> bool:
        """`fits` with every candidate judged, kept when one fits; then, with `search`,
        the closest searched (`_searched`)."""
        judged = judge_all(self.graph, cluster, self.algorithm)
        fitting = [name for name, c in judged.candidates.items() if c.judged is not None]
        if fitting:
            self.judged, self.judged_memory, self.last = judged, memory, fitting[0]
            return True
        return search and self._searched(cluster, {n: c.error for n, c in judged.candidates.items()},
                                         lambda name: judged.candidates[name].device)

    def _searched(self, cluster, errors, device) -> bool:
        """`fits` when no candidate fits without the repair's local search: the two
        whose repair came closest (choice.closest_stuck, from `errors`: name -> the
        repair's error), each searched from where its rounds stopped (judge.fits_with_search;
        `device(name)`: its placement, or None to build it again)."""
        searching = Judging(self.graph, cluster, search=True)
        for name in choice.closest_stuck(errors):
            placed = None                   # resumed from where the rounds stopped
            if errors[name].start is None:      # else searched from its placement
                placed = device(name)
                if placed is None:
                    placed = build(self.graph, cluster, name)
            if fits_with_search(searching, errors[name], placed):
                self.last = name
                return True
        return False

    def _built(self, name, cluster):
        """Candidate `name` built at `cluster`; for a placer that reads no memory, once
        (kept in `built`), with its emulated step and peaks, which hold at any memory."""
        if name in self.built:
            return self.built[name]
        device = build(self.graph, cluster, name)
        if registry.PLACERS[name].reads_memory:
            return _Built(device, None, None)
        schedule = simulate(self.graph, cluster, device)
        self.built[name] = _Built(device, schedule, track_memory(self.graph, cluster, device, schedule).peak_bytes)
        return self.built[name]

    def _error(self, name, cluster, judging):
        """None when candidate `name` fits after its repair, else the repair's error."""
        built = self._built(name, cluster)
        try:
            judge(self.graph, cluster, built.device, built.schedule, judging=judging)
        except UserError as exc:
            return exc
        return None


class _Built(NamedTuple):
    """A candidate built for a Feasibility check: its placement, and for a placer that
    reads no memory its emulated step and peaks (the same at any memory), else None."""

    device: np.ndarray
    schedule: object
    peaks: np.ndarray


def _fitting_top(graph, cluster, at_memory, low, feasible) -> int:
    """A memory at which the algorithm fits, to start the bisection from: the peak of
    the placement at the cluster's memory, if it fits there, else the cluster's memory;
    without a fit at the cluster's memory, the one-device peak of the whole step
    (everything on one device fits there, and the portfolio tries that)."""
    if at_memory is not None:
        peak = max(_memory(max(at_memory.report.peak_memory_bytes), cluster.reserve), low)
        return peak if peak < at_memory.memory and feasible.fits(peak) else at_memory.memory
    one = max(_memory(_one_device_peak(graph, cluster), cluster.reserve), low)
    if not feasible.fits(one):
        raise RuntimeError(f"no placement fits at the one-device peak ({format_size(one)} per device)")
    return one


def _bisect(low, top, fits, at_bound=None) -> int:
    """The least memory found to fit between `low` (the bound: nothing fits below it)
    and `top` (fits), bisecting until the bracket is within TOLERANCE of its top, or
    the top within NEAR_BOUND of the bound (`_near`: no placement can do much better),
    and then tries the bound itself once with `at_bound` (default `fits`; one whose
    True is a fit and whose False may only be cheaper): a fit there is the least
    memory exactly.
    From the top down: a memory that fits is quick to show (the first candidate tried
    fits), one that does not takes every candidate's repair. So once the bracket is
    within ENDGAME times TOLERANCE of its top, the next memory is not the midpoint but
    the higher of the top less TOLERANCE (its failure ends the search) and `_near`
    (its fit ends it): the last steps fail at most once."""
    lo, best, near = low - 1, top, _near(low)
    while best - lo > max(1, math.floor(TOLERANCE * best)) and best > near:
        mid = (lo + best) // 2
        if best - lo < ENDGAME * TOLERANCE * best:
            mid = max(best - max(1, math.floor(TOLERANCE * best)), near)
        if fits(mid):
            best = mid
        else:
            lo = mid
    if lo < low <= near and low < best and (at_bound or fits)(low):     # near the bound: at it, exact
        best = low
    return best


def _near(low) -> int:
    """The most memory within NEAR_BOUND of the bound `low`: a fit there ends the search."""
    return math.floor((1 + NEAR_BOUND) * low)


def _memory(capacity, reserve) -> int:
    """The least memory per device whose usable part (memory minus the reserve, as
    Cluster.capacity floors it) holds `capacity` bytes."""
    m = int(math.ceil(capacity / (1.0 - reserve))) if reserve else int(capacity)
    while math.floor(m * (1.0 - reserve)) < capacity:
        m += 1
    while m > 0 and math.floor((m - 1) * (1.0 - reserve)) >= capacity:
        m -= 1
    return m


def _one_device_peak(graph, cluster) -> int:
    """The emulated peak of the whole step on the first device of `cluster`."""
    one = first_devices(cluster, 1)
    device = np.zeros(graph.num_nodes, np.int32)
    return int(track_memory(graph, one, device, simulate(graph, one, device)).peak_bytes.max())

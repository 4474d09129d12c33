"""An exact candidate for small graphs: placement and schedule searched together by a
constraint model (OR-Tools CP-SAT), whose proven bound is also a lower bound on every
placement's emulated step (docs/bounds.md).

The model relaxes the emulator's rules (pardnn.emulator.scheduler) and keeps what
every emulated schedule obeys: each colocation group on one allowed device, one op at
a time per device, and a node starting no earlier than each input's producer finishes,
plus, when they sit on different devices, the cheapest transfer of that input
(Cluster.cheapest_transfer_us). It leaves out the executor's FIFO order, link
contention and memory, which only add time or rule placements out. Times are counted in
grid units of the step's horizon / GRID, each cost rounded down, so the model's
optimum (and its bound) never exceeds the emulated step of its placement.

The search is deterministic: one worker, a fixed seed and a limit in CP-SAT's
deterministic time (`deterministic_limit`), never a wall clock. It runs on graphs of at most MAX_NODES nodes
(`applies`); its last few improving solutions are the candidates, best first.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from dataclasses import dataclass

import numpy as np

from pardnn.graph.constraints import allowed_devices
from pardnn.graph.forced_levels import input_pairs, start_and_tail_floors
from pardnn.placers import heft

MAX_NODES = 400               # larger graphs: the model answers too late to help (docs/bounds.md)
DETERMINISTIC_PER_NODE = 4e-4  # CP-SAT's deterministic seconds per node for one solve (docs/bounds.md)
GRID = 1_000_000              # time units over the horizon
KEEP = 3                      # improving solutions kept as candidates
ORTOOLS = "ortools.sat.python.cp_model"  # the module that must be imported before TensorFlow


@dataclass(frozen=True)
class Solved:
    """The search's outcome: placements best first, and what it proved."""

    placements: list           # int32 device per node, the model's best first
    starts_us: np.ndarray      # the best placement's start per node in the model's schedule
    bound_us: float            # no placement's emulated step is shorter
    optimal: bool              # the model's optimum was proven (bound = best model step)


def applies(graph, cluster) -> bool:
    """Whether the exact candidate runs on this graph (small enough to answer) and
    cluster (its devices at rate 1: the model gives each op its profiled duration, so
    on devices of other speeds it neither places nor bounds)."""
    return (0 < graph.num_nodes <= MAX_NODES and cluster.num_devices >= 2 and cluster.uniform
            and bool(np.isfinite(_horizon_us(graph, cluster))))


def proven_bound_us(graph, cluster) -> float:
    """The model's proven bound on every placement's emulated step; 0.0 where the
    model does not run."""
    return solve(graph, cluster).bound_us if applies(graph, cluster) else 0.0


def place(graph, cluster, timings=None) -> np.ndarray:
    """The model's best placement (its schedule's step, not the emulator's)."""
    return solve(graph, cluster).placements[0]


def solve(graph, cluster) -> Solved:
    """Build and solve the model once per graph and cluster (the graph's memo). CP-SAT crashes in
    a process that imported TensorFlow before it (google/or-tools#3230); imported the
    other way round, as pardnn.tf.quiet_import does, both work. In a process where
    TensorFlow came first (a user's script) the model runs in a fresh interpreter that
    imports neither TensorFlow nor the caller's script, with the same answer."""
    return graph.memoized(("exact model", cluster), lambda: _solve_apart(graph, cluster) if _tensorflow_first()
                          else solve_here(graph, cluster))


def _tensorflow_first() -> bool:
    """Whether TensorFlow was imported and OR-Tools' CP-SAT not before it (sys.modules
    keeps the order modules were first imported in)."""
    loaded = list(sys.modules)
    if "tensorflow" not in sys.modules:
        return False
    return ORTOOLS not in sys.modules or loaded.index(ORTOOLS) > loaded.index("tensorflow")


def deterministic_limit(num_nodes) -> float:
    """The search's limit in CP-SAT's deterministic seconds: in proportion to the graph,
    so that the model costs about what the other candidates do (0.1 at 250 nodes)."""
    return DETERMINISTIC_PER_NODE * num_nodes


def _solve_apart(graph, cluster) -> Solved:
    """solve_here in a child interpreter: the problem in through stdin, the answer out
    through stdout, both pickled."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}
    child = subprocess.run([sys.executable, "-c", "from pardnn.placers.exact import serve; serve()"],
                           input=pickle.dumps((graph, cluster)), capture_output=True, env=env)
    if child.returncode != 0:
        raise RuntimeError(f"the exact model's process failed ({child.returncode}): "
                           f"{child.stderr.decode(errors='replace')[-500:]}")
    return pickle.loads(child.stdout)


def serve() -> None:
    """The child's side of _solve_apart."""
    graph, cluster = pickle.load(sys.stdin.buffer)
    sys.stdout.buffer.write(pickle.dumps(solve_here(graph, cluster)))


def solve_here(graph, cluster, fixed=None) -> Solved:
    """The search, in this process (which must not have imported TensorFlow first);
    with `fixed` (device per node), only the schedule of that placement is searched."""
    from ortools.sat.python import cp_model     # ORTOOLS, imported on first use

    model = _Model(graph, cluster, cp_model.CpModel(), fixed)
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1
    solver.parameters.random_seed = 0
    solver.parameters.max_deterministic_time = deterministic_limit(graph.num_nodes)
    keep = _keeper(graph, model, cp_model.CpSolverSolutionCallback)
    status = solver.Solve(model.cp, keep)
    proved = status in (cp_model.OPTIMAL, cp_model.FEASIBLE, cp_model.UNKNOWN)
    bound_us = max(0.0, float(solver.BestObjectiveBound())) * model.unit if proved else 0.0
    placements = keep.placements[::-1][:KEEP] or [model.hint]
    starts = keep.starts[-1] if keep.starts else model.hint_start
    return Solved(placements=placements, starts_us=starts * model.unit, bound_us=bound_us,
                  optimal=status == cp_model.OPTIMAL)


class _Model:
    """The CP-SAT model: a device per colocation group, a start per node.

    Starts are bounded by the floors of pardnn.graph.forced_levels and by the step of
    a HEFT placement scheduled in the model (its hint): the model's optimum is no
    longer than that step, so no optimal solution is cut off."""

    def __init__(self, graph, cluster, cp, fixed=None):
        self.cp = cp
        horizon_us = _horizon_us(graph, cluster)
        self.unit = horizon_us / GRID if horizon_us > 0 else 1.0
        dur = np.floor(graph.comp_us / self.unit)
        comm = cluster.cheapest_transfer_us(graph.edge_bytes)
        comm[graph.group[graph.edge_src] == graph.group[graph.edge_dst]] = np.inf
        lag = np.floor(np.minimum(comm, horizon_us) / self.unit)
        ptr, src, plag = input_pairs(graph.edge_src, graph.edge_dst, lag, graph.num_nodes)
        dst = np.repeat(np.arange(graph.num_nodes), np.diff(ptr))
        self.hint = heft.place(graph, cluster) if fixed is None else np.asarray(fixed, np.int32)
        self.hint_start = hint_start = _list_schedule(graph, self.hint, dur, src, dst, plag)
        top = int((hint_start + dur).max())
        est, tail = start_and_tail_floors(graph, dur, lag)
        allowed = allowed_devices(graph, cluster)
        self.device_vars = [{int(d): cp.NewBoolVar(f"g{g}d{d}") for d in np.flatnonzero(allowed[g])}
                            for g in range(graph.num_groups)]
        for g, choice in enumerate(self.device_vars):
            cp.AddExactlyOne(choice.values())
            first = graph.group_members(g)[0]
            for d, x in choice.items():
                cp.AddHint(x, int(self.hint[first]) == d)
                if fixed is not None:
                    cp.Add(x == int(int(self.hint[first]) == d))
        latest = np.maximum(est, top - dur - tail).astype(np.int64)
        self.start = start = [cp.NewIntVar(int(est[n]), int(latest[n]), f"s{n}") for n in range(graph.num_nodes)]
        for n in range(graph.num_nodes):
            cp.AddHint(start[n], int(hint_start[n]))
        end = [start[n] + int(dur[n]) for n in range(graph.num_nodes)]
        self._no_overlap(graph, cluster.num_devices, start, dur)
        for u, v, c in zip(src.tolist(), dst.tolist(), plag.tolist()):
            gu, gv = int(graph.group[u]), int(graph.group[v])
            if gu == gv or c == 0:
                cp.Add(start[v] >= end[u])
            else:
                cp.Add(start[v] >= end[u] + int(c) * self._cross(gu, gv))
        makespan = cp.NewIntVar(0, top, "makespan")
        for n in range(graph.num_nodes):
            cp.Add(makespan >= end[n])
        cp.Minimize(makespan)

    def _no_overlap(self, graph, k, start, dur):
        """One op at a time per device: an optional interval per (node, allowed device)."""
        on_device = [[] for _ in range(k)]
        for n in np.flatnonzero(dur > 0).tolist():
            for d, x in self.device_vars[int(graph.group[n])].items():
                interval = self.cp.NewOptionalFixedSizeIntervalVar(start[n], int(dur[n]), x, f"i{n}d{d}")
                on_device[d].append(interval)
        for intervals in on_device:
            self.cp.AddNoOverlap(intervals)

    def _cross(self, gu, gv):
        """A bool that is 1 whenever groups gu and gv are on different devices."""
        cross = self.cp.NewBoolVar(f"x{gu}_{gv}")
        xu, xv = self.device_vars[gu], self.device_vars[gv]
        for d, x in xu.items():
            self.cp.Add(x <= xv[d] + cross) if d in xv else self.cp.Add(x <= cross)
        return cross


def _horizon_us(graph, cluster) -> float:
    """No placement's emulated step is longer: all work plus every edge's costliest
    transfer (going back from the last op, each moment is spent computing, in a transfer,
    or waiting for a link busy with another transfer)."""
    off = ~np.eye(cluster.num_devices, dtype=bool)
    worst = float(cluster.latency_us[off].max()) + graph.edge_bytes / float(cluster.bandwidth[off].min())
    return float(graph.comp_us.sum() + worst.sum())


def _list_schedule(graph, device, dur, src, dst, lag) -> np.ndarray:
    """Starts of `device`'s ops run in node-id (topological) order, each as soon as its
    device is free and its inputs are there: a schedule the model accepts."""
    start, free = np.zeros(graph.num_nodes), np.zeros(int(device.max(initial=0)) + 1)
    arrive = np.zeros(graph.num_nodes)
    by_src = np.argsort(src, kind="stable")
    ptr = np.searchsorted(src[by_src], np.arange(graph.num_nodes + 1))
    for n in range(graph.num_nodes):
        start[n] = max(arrive[n], free[device[n]])
        free[device[n]] = start[n] + dur[n]
        for i in by_src[ptr[n]:ptr[n + 1]].tolist():
            v = dst[i]
            arrive[v] = max(arrive[v], free[device[n]] + (lag[i] if device[v] != device[n] else 0.0))
    return start


def _keeper(graph, model, base):
    """A solution callback that records each improving solution's placement and starts."""

    class Keep(base):
        def __init__(self):
            super().__init__()
            self.placements, self.starts = [], []

        def on_solution_callback(self):
            group_device = np.array([next(d for d, x in choice.items() if self.BooleanValue(x))
                                     for choice in model.device_vars], np.int32)
            self.placements.append(group_device[graph.group])
            self.starts.append(np.array([self.Value(s) for s in model.start], np.float64))

    return Keep()

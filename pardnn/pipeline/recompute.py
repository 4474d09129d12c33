"""Recomputation as a placement lever (issue 51): the graph a plan would run with its
activations recomputed, chosen only when the step does not fit as it is.

Which ops of the backward pass read a recomputed copy is decided by time, not by name
alone: a gradient op that FIFO runs during the forward pass (a shape, a reshape of a
forward tensor: TF puts them in the gradient scope but they need no gradient) keeps
reading the original, or the copy would have to run at forward time too. The *late*
readers are the ops of the backward pass (pardnn.graph.passes.backward_pass: the gradient
scopes and what follows them) that start, on one device under FIFO (pardnn.emulator.scheduler), no sooner than the last
saved activation is made: the forward pass's end, in time. The plan
(pardnn.graph.checkpoints) and the rewrite (pardnn.graph.recompute) take it from there.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pardnn.base.errors import GraphError, UserError
from pardnn.graph import checkpoints
from pardnn.graph.passes import backward_pass
from pardnn.graph.recompute import PREFIX, Recomputed, original_name, with_recompute


@dataclass(frozen=True, eq=False)
class Recomputation:
    """A recomputed graph and how it was made."""

    graph: object           # the CostGraph with the copies
    source: object          # the CostGraph it was made from
    plan: checkpoints.Plan  # what was recomputed (ids of the graph it was made from)
    done: Recomputed        # where the copies went in `graph`


def late_readers(graph, start, finish) -> tuple:
    """(late readers, backward): bool per node, as the module docstring says, from the
    schedule `start`, `finish` of `graph` on one device."""
    backward = backward_pass(graph)
    data = graph.edge_slot >= 0
    made = graph.edge_src[data & backward[graph.edge_dst] & ~backward[graph.edge_src]]
    end = float(finish[made].max()) if len(made) else np.inf
    return backward & (start >= end), backward


def one_device_times(graph) -> tuple:
    """(start, finish) per node of `graph` run on one device under FIFO."""
    from pardnn.emulator.scheduler import simulate
    from pardnn.hardware import parse_devices
    schedule = simulate(graph, parse_devices("cpu:1"), np.zeros(graph.num_nodes, np.int32))
    return schedule.start, schedule.finish


COUNTS = (2, 4, 8, 16, 32, 64)     # segment counts of the plans tried


def recomputations(graph, counts=COUNTS):
    """The levers to try, in the order to try them: a Recomputation per plan
    (pardnn.graph.checkpoints) of `counts` segments, selective (compute-bound ops
    kept) and whole, that recomputes something. Which places best is not known
    before placing (a plan that keeps less leaves the placement more room, one that
    recomputes less adds less compute), so three unlike plans come first: the whole
    and the selective plan of the least estimate, and the plan of the least added
    compute; then the rest by estimate. Each graph is made when asked for (a
    generator)."""
    start, finish = one_device_times(graph)
    readers, backward = late_readers(graph, start, finish)
    facts = checkpoints.passes(graph, readers, backward)
    plans = [checkpoints.plan(graph, c, facts, arithmetic) for arithmetic in (False, True) for c in counts]
    plans = sorted((p for p in plans if len(p.ops)), key=lambda p: (p.estimate, p.segments, p.arithmetic))
    if plans:
        first = [min((p for p in plans if p.arithmetic), key=plans.index, default=None),
                 min((p for p in plans if not p.arithmetic), key=plans.index, default=None),
                 min(plans, key=lambda p: (p.recompute_us, plans.index(p)))]
        plans = [p for p in first if p is not None] + plans
    seen = set()
    for plan in plans:
        key = plan.ops.tobytes()
        if key in seen:
            continue
        seen.add(key)
        new, done = with_recompute(graph, plan.ops, readers, start, finish)
        if len(done) < len(plan.ops):       # segments nothing waits for were dropped
            plan = checkpoints.narrowed(graph, plan, np.flatnonzero(np.isin(done.new_id, done.originals)), facts[1])
            if not len(plan.ops) or plan.ops.tobytes() in seen:
                continue
            seen.add(plan.ops.tobytes())
        yield Recomputation(new, graph, plan, done)


def with_copies(graph, names, source="placement.csv"):
    """`graph` (a profile's) with the copies `names` holds made again as the levers
    made them (the same ops give the same graph): recomputed ops as
    `recomputations` does, then second reads of variables as the host-fetch lever
    does (pardnn.graph.host_fetch). What a placement that uses them placed, from its
    placement.csv's node names; `graph` itself when no name is a copy; UserError
    naming `source` when a copy's op is not in `graph`."""
    from pardnn.graph.host_fetch import READS, with_refetch
    index = graph.index()
    originals = []
    for name in names:
        original = original_name(name)
        if original is not None and original not in index:
            raise UserError(f"{source}: {name!r} recomputes {original!r}, which is not in the profile")
        if original is not None:
            originals.append(original)
    ops = [index[o] for o in originals if graph.ops[index[o]] not in READS]
    reads = [o for o in originals if graph.ops[index[o]] in READS]
    try:
        if ops:
            start, finish = one_device_times(graph)
            graph = with_recompute(graph, ops, late_readers(graph, start, finish)[0], start, finish)[0]
        if reads:
            start, finish = one_device_times(graph)
            index = graph.index()
            graph = with_refetch(graph, [index[r] for r in reads], late_readers(graph, start, finish)[0])[0]
    except GraphError as exc:
        raise UserError(f"{source}: {exc}") from None
    return graph


def placed_graph(graph, placement_csv):
    """`with_copies` of the node names of `placement_csv` (a place output's)."""
    import csv
    try:
        with open(placement_csv, newline="", encoding="utf-8-sig") as f:
            names = [row[0] for row in csv.reader(f) if row and row[0].startswith(PREFIX)]
    except (OSError, UnicodeDecodeError, csv.Error):
        return graph            # read_csv says what is wrong with it
    return with_copies(graph, names, str(placement_csv))


def recompute_line(report) -> str:
    """The summary's line for a placement that recomputes (report.json's `recompute`)."""
    from pardnn.base.units import format_size, format_time
    r = report["recompute"]
    return (f"  recompute: {r['ops']} ops run again in the backward pass ({r['segments']} segments): "
            f"activations kept {format_size(r['kept_before_bytes'])} -> {format_size(r['kept_bytes'])}, "
            f"+{format_time(r['added_us'])} of compute; no placement keeping every activation fits below "
            f"{format_size(r['least_memory_keeping'])} per device")

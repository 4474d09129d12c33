"""The order of a micro-batched step: which ready op each device runs first (issue 50, item 2).

TF's executor runs a device's ready ops first in, first out. On a step split into
micro-batches (pardnn.keras.micro_batches, pardnn.tf.micro_batches: ops named
`micro_batch_<i>/...`) that is GPipe's order: every micro-batch's forward pass as
soon as it can, the backward passes after. Other orders are list schedules, each a
rank per op (pardnn.emulator.scheduler's `priority`):

- `fifo`: TF's own order (no rank; GPipe's, with its bubble of (K-1)/(M+K-1) for a
  stage partition);
- `early-micro-batch`: the op of the earliest micro-batch first, so each micro-batch
  finishes before the next takes a device: the order of 1F1B (Narayanan et al.
  2019), which holds fewer micro-batches' activations at once;
- `backward-first`: backward ops (TF's `gradients` scope, GradientTape's
  `gradient_tape`) before forward ones, then by micro-batch: a device that can
  finish a micro-batch's gradients does so before it starts another forward pass;
- `forward-first`: forward ops first, then by micro-batch: every micro-batch's
  activations early, GPipe's order enforced;
- `weights-last`: 1F1B's order, but each weight gradient (`weight_gradients`) only
  when its device has nothing else ready: the idea of Zero Bubble (Qi et al., ICLR
  2024), which splits the backward pass into the input gradients, which the next
  stage waits for, and the weight gradients, which only the update waits for, and
  runs the latter in the pipeline's bubble. A list schedule fills every device's
  gaps that way, whatever the placement's stages.

`schedules` emulates each order on a placement; `choose` keeps the fastest whose peak
fits (FIFO on a tie: it needs no control edges), and the order that carries it is
`pardnn.graph.order.device_chains` of its emulated starts.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import NamedTuple

import numpy as np

from pardnn.base.errors import UserError
from pardnn.emulator.memory import track_memory
from pardnn.emulator.scheduler import simulate
from pardnn.graph.levels import bottom_levels
from pardnn.graph.order import Order, device_chains
from pardnn.graph.passes import is_backward

SCHEDULES = ("fifo", "early-micro-batch", "backward-first", "forward-first", "weights-last")
MICRO = re.compile(r"(?:^|/)micro_batch_(\d+)/")


class Scheduled(NamedTuple):
    """One order emulated on a placement."""

    name: str
    makespan_us: float
    peak_bytes: np.ndarray      # per device
    fits: bool
    bubble: float               # share of the devices' time idle within the step
    order: Order                # the control edges that carry it (empty for fifo)
    schedule: object            # its emulation (pardnn.emulator.scheduler.Schedule)
    profile: object             # its memory over the step (pardnn.emulator.memory)


def micro_batch_of(graph) -> np.ndarray:
    """int64 per node: its micro-batch (from its name), -1 for the ops they share."""
    found = [MICRO.search(name) for name in graph.names]
    return np.array([int(m.group(1)) if m else -1 for m in found], np.int64)


def weight_gradients(graph) -> np.ndarray:
    """bool per node: a backward op that only the update waits for, i.e. no op after it
    reads a forward op's output (Zero Bubble's W; an input gradient's successors
    include the next layer's backward ops, which read its saved activations, while a
    weight gradient's lead only to the sums and the optimizer). Computed as a bottom
    level (pardnn.graph.levels) whose node weight is 1 for each op reading a forward
    op: a successor's level above 0 marks an op that something later still needs."""
    back = is_backward(graph)
    forward = ~back & (micro_batch_of(graph) >= 0)
    reads = np.zeros(graph.num_nodes, bool)
    reads[graph.edge_dst[forward[graph.edge_src]]] = True
    later = bottom_levels(graph, reads.astype(float)) - reads > 0
    return back & ~later


def ranks(graph, name) -> np.ndarray | None:
    """The rank per node of schedule `name` (None: FIFO). Shared ops (the optimizer,
    the combined gradients) rank after every micro-batch's ops of their phase."""
    if name == "fifo":
        return None
    micro = micro_batch_of(graph)
    last = int(micro.max()) + 1
    micro = np.where(micro < 0, last, micro)
    back = is_backward(graph).astype(np.int64)
    n = np.arange(graph.num_nodes, dtype=np.int64)
    if name == "early-micro-batch":
        key = micro
    elif name == "backward-first":
        key = (1 - back) * (last + 1) + micro
    elif name == "forward-first":
        key = back * (last + 1) + micro
    elif name == "weights-last":
        key = weight_gradients(graph).astype(np.int64) * (last + 1) + micro
    else:
        raise ValueError(f"unknown schedule {name!r}")
    return key * graph.num_nodes + n


def schedules(graph, cluster, device, names=SCHEDULES, among=None) -> list:
    """Each order of `names` emulated on placement `device` (a Scheduled each); its
    control edges chain the ops of `among` (pardnn.graph.order.step_mask; all ops by
    default)."""
    device = np.asarray(device, np.int64)
    capacity = cluster.capacity
    out = []
    for name in names:
        schedule = simulate(graph, cluster, device, ranks(graph, name))
        profile = track_memory(graph, cluster, device, schedule)
        peak, span = profile.peak_bytes, schedule.makespan
        order = Order.empty() if name == "fifo" else device_chains(graph, device, schedule.start, among)
        out.append(Scheduled(name, span, peak, bool(np.all(peak <= capacity)), idle_share(schedule, cluster),
                             order, schedule, profile))
    return out


def idle_share(schedule, cluster) -> float:
    """The bubble: the share of the devices' time within the step that none of them computes."""
    span = schedule.makespan
    return 1.0 - float(schedule.busy_us.sum()) / (cluster.num_devices * span) if span > 0 else 0.0


def micro_batches(graph) -> int:
    """How many micro-batches the graph's names hold (0: not a split step)."""
    return int(micro_batch_of(graph).max()) + 1 if graph.num_nodes else 0


def carry_order(graph, placement, wanted="auto", among=None):
    """(placement, Scheduled list): on a step of two or more micro-batches, `placement`
    with the order of schedule `wanted` ("auto": `choose`'s) carried: its emulation,
    its control edges and its name (a new Placement); on any other graph, or when
    TF's own order is kept, `placement` as it is (and [] on other graphs)."""
    if wanted not in ("auto",) + SCHEDULES:
        raise UserError(f"--schedule: unknown schedule {wanted!r} (choose from auto, {', '.join(SCHEDULES)})")
    if micro_batches(graph) < 2:
        return placement, []
    names = SCHEDULES if wanted == "auto" else tuple(dict.fromkeys(("fifo", wanted)))
    scheduled = schedules(graph, placement.cluster, placement.device, names, among)
    best = choose(scheduled) if wanted == "auto" else scheduled[-1]
    if best.name == "fifo":
        return placement, scheduled
    return replace(placement, schedule=best.schedule, profile=best.profile, order=best.order,
                   schedule_name=best.name), scheduled


TIE = 1e-9     # an order must beat FIFO by more than this share of its step to be carried


def choose(scheduled) -> Scheduled:
    """The fastest order whose peak fits, FIFO (listed first) on a tie: within TIE of
    its step, as on one device, where every order sums the same times in another
    order of additions; the least peak when none fits."""
    fitting = [s for s in scheduled if s.fits]
    if not fitting:
        return min(scheduled, key=lambda s: float(np.max(s.peak_bytes)))
    best = min(fitting, key=lambda s: s.makespan_us)
    first = fitting[0]
    return first if first.name == "fifo" and best.makespan_us >= first.makespan_us * (1 - TIE) else best


def schedule_line(report) -> str:
    """The summary's line on a micro-batched step: its order, each order's step, the bubble."""
    tried = ", ".join(f"{name} {us / 1000:.3f} ms" for name, us in report["schedules"].items())
    return (f"  micro-batches: {report['micro_batches']}, order {report['schedule']} (tried: {tried}); "
            f"bubble {100 * report['bubble']:.1f}% of the devices' time")

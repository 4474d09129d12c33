"""Refinement of the mapping (thesis §4.1.1, "Refinement"): cluster swapping, then
rounds of node moves, every batch judged by the emulator (docs/algorithm.md §3).

The thesis accepts a change when its own estimate improves. Here candidates are
chosen by local estimates, but a batch is kept only when the emulated makespan does
not get worse, so refinement never hurts; emulating once per batch rather than once
per move keeps it affordable. The emulator comes in as `emulate` (the pipeline lends
pardnn.emulator.trial.emulate): a placer imports none.

1. Cluster swapping (pardnn.placers.step1_phases.swapping): a secondary sc whose span is
   less loaded on device b swaps with a lighter secondary on b that starts within
   span(sc) when the sum of their Eq. 4.2 costs drops (the thesis gives no formula).
   Then the affinity candidates (pardnn.placers.step1_phases.affinity, not in the thesis)
   replace the result when one emulates faster.
2. At most K rounds (the thesis switches nodes "at most K times") of the batches in
   MOVE_FINDERS: critical-path switching (pardnn.placers.step1_phases.switching), then,
   not in the thesis, unblocking moves and communication moves
   (pardnn.placers.step1_phases.volume). Rounds stop when one gains less than
   MIN_ROUND_GAIN of the makespan.
3. Last, everything goes to one device if that runs the step faster than the split
   (`_one_device_if_faster`, not in the thesis).
"""

from dataclasses import dataclass

import numpy as np

from pardnn.placers.step1_phases.affinity import affinity_candidates
from pardnn.placers.step1_phases.swapping import swap_clusters
from pardnn.placers.step1_phases.switching import critical_moves, unblock_moves
from pardnn.placers.step1_phases.volume import comm_moves

MIN_ROUND_GAIN = 0.005


@dataclass
class Refined:
    device: np.ndarray
    mapped_makespan_us: float       # emulated, before refinement
    makespan_us: float              # emulated, after
    swaps: int                      # cluster pairs swapped (and kept)
    switches: int                   # nodes moved by critical-path switching (and kept)
    followed: int                   # nodes moved by communication moves (and kept)
    one_device: bool                # everything ended on one device (faster than any split)
    affinity: bool                  # refinement started from the affinity placement
    schedule: object                # pardnn.emulator.scheduler.Schedule of `device`


def refine(graph, cluster, slices, mapping, allowed, rounds: int, emulate) -> Refined:
    """Refine `mapping` (from map_clusters); `allowed` is (groups x devices);
    emulate(graph, cluster, device, beat=inf, paths=True) -> Schedule, or None when a
    lower bound (with `paths`, the longest-path bound too) shows it cannot beat `beat`."""
    device = mapping.device
    schedule = emulate(graph, cluster, device)
    start = schedule.makespan
    swaps = swap_clusters(graph, slices, mapping)
    trial = np.asarray(mapping.links.dev, np.int32)
    if swaps and not np.array_equal(trial, device):
        swapped = emulate(graph, cluster, trial)
        if swapped.makespan <= schedule.makespan:
            device, schedule = trial, swapped
        else:
            swaps = 0
    device, schedule, affine = _affinity_if_faster(graph, cluster, device, schedule, allowed, emulate)
    moved = {finder: 0 for finder in MOVE_FINDERS}

    def count(finder, result, nodes):
        moved[finder] += nodes
    device, schedule, _ = move_rounds(graph, cluster, device, schedule, allowed,
                                      _emulated(graph, cluster, emulate), rounds, count)
    switches, followed = moved[critical_moves] + moved[unblock_moves], moved[follow_data]
    device, schedule, merged = _one_device_if_faster(graph, cluster, device, schedule, allowed, emulate)
    return Refined(device, start, schedule.makespan, swaps, switches, followed, merged, affine, schedule)


def follow_data(graph, cluster, device, schedule, allowed) -> list:
    """pardnn.placers.step1_phases.volume's communication moves, with the move finders' signature."""
    return comm_moves(graph, cluster, device, allowed)


# The move finders of a refinement round, in order.
MOVE_FINDERS = (critical_moves, unblock_moves, follow_data)


def move_rounds(graph, cluster, device, result, allowed, judge, rounds, kept, late=None):
    """At most `rounds` rounds of the MOVE_FINDERS' batches from placement `device`, whose
    judged `result` has the emulated `.schedule` (or is the Schedule itself), each batch
    judged by `judge` (see first_improving); rounds stop when one gains less than
    MIN_ROUND_GAIN of the makespan, or before a finder once `late()` is true.
    kept(finder, result, nodes) hears of each batch kept. Returns (device, result, late).

    A finder that found nothing is not asked again until a batch is kept: it would be
    given the same placement and schedule, and find the same moves, which lose again."""
    fruitless = set()
    for _ in range(rounds):
        begin = _schedule(result).makespan
        for finder in MOVE_FINDERS:
            if late is not None and late():
                return device, result, True
            if finder in fruitless:
                continue
            schedule = _schedule(result)
            moves = finder(graph, cluster, device, schedule, allowed)
            found = first_improving(graph, device, schedule.makespan, batches_of(moves), judge)
            if found is None:
                fruitless.add(finder)
                continue
            device, result, nodes = found
            fruitless.clear()
            kept(finder, result, nodes)
        if _schedule(result).makespan > begin * (1.0 - MIN_ROUND_GAIN):
            break
    return device, result, False


def _schedule(result):
    return getattr(result, "schedule", result)


def batches_of(moves) -> list:
    """The batches to try of `moves` (best first), in turn until one is faster: all of
    them, the better half, the best quarter, the best one. The moves interact (along
    one path, or on one device's queue), so all together are often slower while a
    part is faster; two batches left gains behind (docs/algorithm.md, "Refinement")."""
    sizes = dict.fromkeys((len(moves), len(moves) // 2, len(moves) // 4, 1))
    return [moves[:size] for size in sizes if size > 0]


def _affinity_if_faster(graph, cluster, device, schedule, allowed, emulate):
    """(device, schedule, True) with the fastest of pardnn.placers.step1_phases.affinity's
    candidates if the emulator finds it faster than the (swapped) mapping; else
    the input."""
    affine = False
    for candidate in affinity_candidates(graph, cluster, allowed):
        trial = emulate(graph, cluster, candidate, schedule.makespan)
        if trial is not None and trial.makespan < schedule.makespan:
            device, schedule, affine = candidate, trial, True
    return device, schedule, affine


def _one_device_if_faster(graph, cluster, device, schedule, allowed, emulate):
    """(device, schedule, True) with every node on the device that already holds
    the most work, if all groups may go there and that is faster; else the input.

    Not in the thesis: when ops are short next to link latency (small batches,
    tiny layers), no split pays for its transfers and Step 1's K primaries would
    be slower than one device, whose emulated step is exactly the total work."""
    usable = np.flatnonzero(allowed.all(axis=0))
    if len(usable) == 0 or graph.total_work_us() >= schedule.makespan:
        return device, schedule, False
    held = np.bincount(device, graph.comp_us, minlength=cluster.num_devices)[usable]
    one = np.full(graph.num_nodes, usable[np.argmax(held)], np.int32)
    single = emulate(graph, cluster, one)
    return (one, single, True) if single.makespan < schedule.makespan else (device, schedule, False)


def first_improving(graph, device, makespan, batches, judge):
    """(device, result, nodes moved) for the first batch of moves [(gain, group,
    device)], one per group, whose placement `judge` finds faster than `makespan`; None if none is.

    judge(trial, makespan) -> (device, makespan, result), or None when the trial is
    unusable or cannot beat `makespan`; the device it returns may differ from the trial
    (a repair may move more)."""
    tried = set()
    for batch in batches:
        if not batch or len(batch) in tried:
            continue
        tried.add(len(batch))
        groups = np.fromiter((g for _, g, _ in batch), np.int64, len(batch))
        judged = judge(_moved(graph, device, groups, [d for _, _, d in batch]), makespan)
        if judged is not None and judged[1] < makespan:
            return judged[0], judged[2], int(np.diff(graph.group_ptr)[groups].sum())
    return None


def _moved(graph, device, groups, targets) -> np.ndarray:
    """`device` with each of `groups` (distinct) moved to its target device."""
    target = np.full(graph.num_groups, -1, np.int64)
    target[groups] = targets
    to = target[graph.group]
    trial = device.copy()
    trial[to >= 0] = to[to >= 0]
    return trial


def _emulated(graph, cluster, emulate):
    """The judge of refinement without memory limits: the emulated schedule, or None
    when the trial's lower bound shows it cannot beat the makespan to beat."""
    def judge(trial, beat):
        schedule = emulate(graph, cluster, trial, beat, paths=False)
        return None if schedule is None else (trial, schedule.makespan, schedule)
    return judge

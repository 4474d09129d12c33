"""The judge every placement goes through: the memory repair (pardnn.repair, thesis
§4.1.2 Step 2), then the emulator (pardnn.emulator) on what it gives.

`judge` emulates the placement; while some device's emulated peak exceeds its
capacity (memory minus the reserve), it runs a round of the overflow repair and
emulates again, once per round; the repair's complete search on small graphs judges
its trials with the same emulator. The result fits every device, or the repair's
UserError says whether no placement fits or none was found (docs/repair.md).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from pardnn.emulator.memory import track_memory
from pardnn.emulator.scheduler import simulate
from pardnn.base.errors import UserError
from pardnn.graph import NORMAL, REFERENCE, RESIDUAL
from pardnn.repair import local_search
from pardnn.repair.overflow_repair import OverflowRepair, RepairSetup


@dataclass(frozen=True, eq=False)
class Judged:
    """A repaired placement and the emulation that shows it fits."""

    device: np.ndarray          # int32 per node
    moved: np.ndarray           # bool per node: moved by the repair
    peak_before: np.ndarray     # int64 per device: emulated peak before the repair
    schedule: object            # pardnn.emulator.scheduler.Schedule of `device`
    profile: object             # pardnn.emulator.memory.MemoryProfile of `device`
    rounds: int                 # emulations after the first


class Judging:
    """What judging many placements of `graph` on `cluster` shares, each part built when
    first needed (so a forked worker builds its own): `fits_surely`'s test and the
    repair's fixed part (pardnn.repair.overflow_repair.RepairSetup). `search`: the
    repair may end with its local search (pardnn.repair.local_search), which the
    portfolio asks for only when no candidate fits without it."""

    def __init__(self, graph, cluster, search=False):
        self.graph, self.cluster, self.search = graph, cluster, search
        self._fits = self._setup = None

    def fits(self, device) -> bool:
        if self._fits is None:
            self._fits = fits_surely(self.graph, self.cluster)
        return self._fits(device)

    def setup(self) -> RepairSetup:
        if self._setup is None:
            self._setup = RepairSetup(self.graph, self.cluster)
        return self._setup


def judge(graph, cluster, device, schedule=None, judging=None) -> Judged:
    """`device` repaired until every device fits, and emulated (module docstring).
    `schedule`, when given, is the emulation of `device` already at hand. With
    `judging` (a Judging of this graph and cluster), a placement that `fits_surely`
    shows cannot overflow is only emulated: such a Judged has no profile and no peaks
    (None) until `with_memory`; without it, every placement's memory is tracked."""
    device = np.array(device, np.int32)
    if judging is not None and judging.fits(device):
        schedule = simulate(graph, cluster, device) if schedule is None else schedule
        return Judged(device, np.zeros(graph.num_nodes, bool), None, schedule, None, 0)
    schedule, profile = _emulate(graph, cluster, device, schedule)
    before = profile.peak_bytes.copy()
    repair, rounds = None, 0
    while np.any(profile.peak_bytes > cluster.capacity):
        if repair is None:
            setup = RepairSetup(graph, cluster) if judging is None else judging.setup()
            repair = OverflowRepair(setup, profile, lambda trial: _emulate(graph, cluster, trial),
                                    search=judging is not None and judging.search)
        device = repair.round(device, schedule, profile)
        schedule, profile = _emulate(graph, cluster, device)
        rounds += 1
    moved = np.zeros(graph.num_nodes, bool) if repair is None else repair.moved[graph.group]
    return Judged(device, moved, before, schedule, profile, rounds)


def fits_with_search(judging, stuck, device=None) -> bool:
    """Whether the placement whose repair at judging's cluster stopped with `stuck`
    (overflow_repair.Stuck) fits when the repair may end with its local search
    (`judging`, a Judging with search): its rounds are those that stopped, so the
    search starts where they did when `stuck` says where; else `device`, the
    placement, is judged again."""
    graph, cluster = judging.graph, judging.cluster
    if stuck.start is not None:
        return local_search.descend(graph, cluster, stuck.start, judging.setup().allowed,
                                    lambda trial: _emulate(graph, cluster, trial)) is not None
    try:
        judge(graph, cluster, device, judging=judging)
    except UserError:
        return False
    return True


def with_memory(graph, cluster, judged) -> Judged:
    """`judged` with its memory profile, tracked now if `judge` skipped it or
    `without_profile` dropped it (the profile judge gives is that of its last
    emulation); and its peaks before repair, the profile's when judge skipped them
    (then nothing was repaired)."""
    if judged.profile is not None:
        return judged
    profile = track_memory(graph, cluster, judged.device, judged.schedule)
    before = profile.peak_bytes.copy() if judged.peak_before is None else judged.peak_before
    return replace(judged, profile=profile, peak_before=before)


def without_profile(judged) -> Judged:
    """`judged` without its memory profile, which `with_memory` can track again: what a
    candidate keeps while the others are built and refined, and what goes between
    processes (at a million nodes a profile is about 120 MB)."""
    return replace(judged, profile=None)


def _emulate(graph, cluster, device, schedule=None):
    schedule = simulate(graph, cluster, device) if schedule is None else schedule
    return schedule, track_memory(graph, cluster, device, schedule)


EXACT_FLOAT_SUMS = 2.0**53     # float64 sums of whole bytes are exact below this (8 PiB)


def fits_surely(graph, cluster):
    """fits(device): True when every device's capacity holds all the bytes
    pardnn.emulator.memory could ever count there at once under `device`: its resident
    state, its ops' outputs and scratch, and a copy of every tensor an edge brings in
    from another device. When all of those bytes together fit the smallest device,
    every placement does, and fits asks nothing of the placement."""
    held = (np.where(graph.kind == RESIDUAL, graph.out_bytes, 0)
            + np.where(graph.kind == REFERENCE, 0, graph.persist_bytes)
            + np.where(graph.kind == NORMAL, graph.out_bytes, 0) + graph.temp_bytes)
    data = np.flatnonzero(graph.edge_slot >= 0)
    src, dst, nbytes = graph.edge_src[data], graph.edge_dst[data], graph.edge_bytes[data]
    if cluster.num_devices and int(held.sum()) + int(nbytes.sum()) <= int(cluster.capacity.min()):
        return lambda device: True      # every byte fits on any one device: any placement fits

    def fits(device) -> bool:
        device = np.asarray(device)
        into = device[dst]
        received = device[src] != into
        most = (np.bincount(device, held, cluster.num_devices)
                + np.bincount(into[received], nbytes[received], cluster.num_devices))
        return bool(np.all((most <= cluster.capacity) & (most < EXACT_FLOAT_SUMS)))
    return fits

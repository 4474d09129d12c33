"""The judge every placement goes through: the memory repair (pardnn.repair, thesis
§4.1.2 Step 2), then the emulator (pardnn.emulator) on what it gives.

`judge` emulates the placement; while some device's emulated peak exceeds its
capacity (memory minus the reserve), it runs a round of the overflow repair and
emulates again, once per round; the repair's complete search on small graphs judges
its trials with the same emulator. The result fits every device, or the repair's
UserError says whether no placement fits or none was found (docs/repair.md).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pardnn.emulator.memory import track_memory
from pardnn.emulator.scheduler import simulate
from pardnn.repair.overflow_repair import OverflowRepair


@dataclass(frozen=True, eq=False)
class Judged:
    """A repaired placement and the emulation that shows it fits."""

    device: np.ndarray          # int32 per node
    moved: np.ndarray           # bool per node: moved by the repair
    peak_before: np.ndarray     # int64 per device: emulated peak before the repair
    schedule: object            # pardnn.emulator.scheduler.Schedule of `device`
    profile: object             # pardnn.emulator.memory.MemoryProfile of `device`
    rounds: int                 # emulations after the first

    def report_fields(self, cluster) -> dict:
        """report.json fields: moved_nodes, the peaks before repair, the devices repaired."""
        over = self.peak_before > cluster.capacity
        return {"moved_nodes": int(self.moved.sum()),
                "peak_memory_before_repair_bytes": [int(x) for x in self.peak_before],
                "repaired_devices": [cluster.names[d] for d in np.flatnonzero(over)],
                "repair_rounds": self.rounds}


def judge(graph, cluster, device, schedule=None) -> Judged:
    """`device` repaired until every device fits, and emulated (module docstring).
    `schedule`, when given, is the emulation of `device` already at hand."""
    device = np.array(device, np.int32)
    schedule, profile = _emulate(graph, cluster, device, schedule)
    before = profile.peak_bytes.copy()
    repair, rounds = None, 0
    while np.any(profile.peak_bytes > cluster.capacity):
        repair = repair or OverflowRepair(graph, cluster, profile,
                                          lambda trial: _emulate(graph, cluster, trial)[1].peak_bytes)
        device = repair.round(device, schedule, profile)
        schedule, profile = _emulate(graph, cluster, device)
        rounds += 1
    moved = np.zeros(graph.num_nodes, bool) if repair is None else repair.moved[graph.group]
    return Judged(device, moved, before, schedule, profile, rounds)


def _emulate(graph, cluster, device, schedule=None):
    schedule = simulate(graph, cluster, device) if schedule is None else schedule
    return schedule, track_memory(graph, cluster, device, schedule)

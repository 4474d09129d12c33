"""ParDNN Step 2, overflow repair (thesis §4.1.2, "Addressing Overflow", Eq. 4.4-4.5):
make every device's emulated memory fit its capacity, or say precisely why it cannot.

`repair(graph, cluster, device)` runs after every placer. It emulates the placement
(pardnn.emulator.scheduler, pardnn.emulator.memory); while some device's peak exceeds
`cluster.capacity` (memory minus the reserve), it runs a round
(pardnn.repair.repair_round): at each overflow, the greedy two-heap min-knapsack picks
colocation groups by move cost per byte freed, and each goes to a device that can
absorb it; then it emulates again, once per round rather than once per move.

Termination: a group that has moved is frozen, so each node moves at most once and
the rounds end. When a round can move nothing while a device still overflows, the
complete search (pardnn.repair.exhaustive) takes over: on small graphs it tries every
placement within a work limit. Only when it finds none is there a UserError with the
device, the time, the overflow and the least per-device memory the graph could need
(`least_memory`); it says "no placement fits" only when it has a proof (the search
was complete, or that least memory already rules the cluster out, which is checked
before any move), and otherwise that pardnn found none and the bound below which
none exists.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pardnn.graph.node_memory import resident_bytes
from pardnn.graph.constraints import allowed_devices
from pardnn.repair import exhaustive
from pardnn.repair.footprint import GroupLinks
from pardnn.repair.least_memory import group_resident, least_memory
from pardnn.emulator.memory import track_memory
from pardnn.repair.repair_round import RepairRound
from pardnn.emulator.scheduler import simulate
from pardnn.errors import UserError
from pardnn.units import format_size, format_time


@dataclass(frozen=True, eq=False)
class Repair:
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


def repair(graph, cluster, device, schedule=None) -> Repair:
    """Move colocation groups until every device fits its capacity (see the module
    docstring). `schedule`, when given, is the emulation of `device` already at hand."""
    device = np.array(device, np.int32)
    given = _group_device(graph, device)
    schedule, profile = _emulate(graph, cluster, device, schedule)
    before = profile.peak_bytes.copy()
    moved = np.zeros(graph.num_groups, bool)
    cap = cluster.capacity
    rounds = 0
    if np.any(before > cap):
        _fail_if_hopeless(graph, cluster, profile)
        links, allowed = GroupLinks(graph, cluster), allowed_devices(graph, cluster)
    while np.any(profile.peak_bytes > cap):
        step = RepairRound(graph, cluster, links, allowed, device, schedule, profile, moved).run()
        if step.moves:
            groups, targets = np.array(step.moves, np.int64).T
            group_dev = _group_device(graph, device)
            group_dev[groups] = targets
            moved[groups] = True
        else:
            group_dev = _searched(graph, cluster, allowed, device, step.stuck[0])
            moved |= group_dev != given
        device = group_dev[graph.group].astype(np.int32)
        schedule, profile = _emulate(graph, cluster, device)
        rounds += 1
    return Repair(device, moved[graph.group], before, schedule, profile, rounds)


def _group_device(graph, device):
    return np.asarray(device, np.int64)[graph.group_nodes[graph.group_ptr[:-1]]]


def _searched(graph, cluster, allowed, device, stuck):
    """The greedy rounds are stuck: a placement from the complete search
    (pardnn.repair.exhaustive), or UserError saying whether none exists or none was found."""
    found = exhaustive.search(graph, cluster, _group_device(graph, device), allowed)
    if found.group_device is None:
        raise UserError(_message(graph, cluster, *stuck, search=found))
    return found.group_device


def _emulate(graph, cluster, device, schedule=None):
    schedule = simulate(graph, cluster, device) if schedule is None else schedule
    return schedule, track_memory(graph, cluster, device, schedule)


def _fail_if_hopeless(graph, cluster, profile):
    """UserError before any move when `least_memory` rules the cluster out: a group or
    an op's working set fits no device, or the resident state exceeds all of them."""
    need = least_memory(graph, cluster.num_devices)
    cap = cluster.capacity
    if max(need["largest colocation group"], need["largest op working set"]) > cap.max() \
            or int(group_resident(graph).sum()) > cap.sum():
        d = int(np.argmax(profile.peak_bytes - cap))
        raise UserError(_message(graph, cluster, d, float(profile.peak_time_us[d]),
                                 int(profile.peak_bytes[d] - cap[d]), proved=True))


def _holder_clause(graph, cluster, group, held) -> str:
    """Names the colocation group holding the most at the stuck point (by its member
    with the most resident state: the variable, for a variable's group), and says so
    when it alone holds more than any device can: it overflows wherever it goes."""
    if group < 0:
        return ""
    members = graph.group_members(group)
    name = graph.names[members[np.argmax(resident_bytes(graph)[members])]]
    alone = " alone, more than any device's capacity" if held > cluster.capacity.max() else ""
    return (f"; the colocation group of {name!r} ({len(members)} nodes) holds "
            f"{format_size(held)} there{alone}")


def _message(graph, cluster, d, time_us, overflow, group=-1, held=0, search=None, proved=False) -> str:
    """The one-line reason: "no placement fits" only with a proof (the bound
    `least_memory` exceeds the capacity, or the complete search tried everything),
    otherwise that pardnn found none and the bound below which none exists."""
    need = least_memory(graph, cluster.num_devices)
    cap = int(cluster.capacity[d])
    bound = max(need.values())
    parts = ", ".join(f"{k} {format_size(v)}" for k, v in need.items())
    where = (f"{cluster.names[d]} overflows by {overflow} bytes ({format_size(overflow)}) "
             f"at t={format_time(time_us)} (capacity {format_size(cap)} = memory minus "
             f"{cluster.reserve:.0%} reserve){_holder_clause(graph, cluster, group, held)}")
    advice = "raise --memory, lower --reserve or add devices"
    if proved:
        return (f"memory: no placement fits: this graph needs at least {format_size(bound)} per device "
                f"({parts}); {where}: {advice}")
    if search is not None and search.complete:
        uniform = len(set(cluster.capacity.tolist())) == 1
        least = (f" (none fits below {format_size(cap + search.least_overflow)} per device)"
                 if uniform else "")
        return (f"memory: no placement fits: the complete search ruled out every placement of the "
                f"{graph.num_groups} colocation groups ({search.emulated} emulated, the rest by their "
                f"working sets); each overflows a device by at least {search.least_overflow} bytes{least}; "
                f"{where}: {advice}")
    return (f"memory: pardnn found no placement within {format_size(cap)} per device; the bound below "
            f"which none exists is {format_size(bound)} ({parts}); {where}: {advice}")

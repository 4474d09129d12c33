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
placement cannot be repaired: UserError with the device, the time, the overflow and
the least per-device memory the graph could need (`least_memory`). The same error
comes at once, before any move, when that least memory already rules the cluster out.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pardnn.graph.node_memory import resident_bytes
from pardnn.graph.constraints import allowed_devices
from pardnn.repair.footprint import GroupLinks, distinct
from pardnn.emulator.memory import track_memory
from pardnn.repair.repair_round import RepairRound
from pardnn.emulator.scheduler import simulate
from pardnn.errors import UserError
from pardnn.graph import NORMAL
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
        if not step.moves:
            raise UserError(_message(graph, cluster, *step.stuck[0]))
        groups, targets = np.array(step.moves, np.int64).T
        group_dev = device[graph.group_nodes[graph.group_ptr[:-1]]]
        group_dev[groups] = targets
        device = group_dev[graph.group].astype(np.int32)
        moved[groups] = True
        schedule, profile = _emulate(graph, cluster, device)
        rounds += 1
    return Repair(device, moved[graph.group], before, schedule, profile, rounds)


def _emulate(graph, cluster, device, schedule=None):
    schedule = simulate(graph, cluster, device) if schedule is None else schedule
    return schedule, track_memory(graph, cluster, device, schedule)


def least_memory(graph, k: int) -> dict:
    """Lower bounds (bytes) on the memory some device needs under the emulator's model,
    whatever the placement: the largest colocation group's resident state; the total
    resident state shared over k devices; the largest working set of one op, held at
    the instant it starts: its group's resident state, its own output and scratch, and each input
    from a NORMAL producer (the smaller of the producer's output and the bytes sent,
    as the input is either that output or a received copy). Ops that take no time are
    left out (their buffers may live for zero time), as are inputs from variables and
    references (they alias resident state another group may already count)."""
    group_res = _group_resident(graph)
    return {"largest colocation group": int(group_res.max(initial=0)),
            "total resident / K": int(-(-int(group_res.sum()) // k)),
            "largest op working set": int(_working_sets(graph, group_res).max(initial=0))}


def _working_sets(graph, group_res):
    src, dst = graph.edge_src, graph.edge_dst
    data = np.flatnonzero((graph.edge_slot >= 0) & (graph.kind[src] == NORMAL))
    pair = src[data].astype(np.int64) * graph.num_nodes + dst[data]
    order = np.argsort(pair, kind="stable")
    data, pair = data[order], pair[order]
    starts = np.flatnonzero(distinct(pair))
    inputs = np.zeros(graph.num_nodes, np.int64)
    if len(starts):
        sent = np.add.reduceat(graph.edge_bytes[data], starts)
        first = data[starts]
        np.add.at(inputs, dst[first], np.minimum(sent, graph.out_bytes[src[first]]))
    own = np.where(graph.kind == NORMAL, graph.out_bytes, 0) + graph.temp_bytes
    return np.where(graph.comp_us > 0, group_res[graph.group] + inputs + own, 0)


def _group_resident(graph):
    return np.bincount(graph.group, resident_bytes(graph), minlength=graph.num_groups).astype(np.int64)


def _fail_if_hopeless(graph, cluster, profile):
    """UserError before any move when `least_memory` rules the cluster out: a group or
    an op's working set fits no device, or the resident state exceeds all of them."""
    need = least_memory(graph, cluster.num_devices)
    cap = cluster.capacity
    if max(need["largest colocation group"], need["largest op working set"]) > cap.max() \
            or int(_group_resident(graph).sum()) > cap.sum():
        d = int(np.argmax(profile.peak_bytes - cap))
        raise UserError(_message(graph, cluster, d, float(profile.peak_time_us[d]),
                                 int(profile.peak_bytes[d] - cap[d])))


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


def _message(graph, cluster, d, time_us, overflow, group=-1, held=0) -> str:
    need = least_memory(graph, cluster.num_devices)
    cap = int(cluster.capacity[d])
    parts = ", ".join(f"{k} {format_size(v)}" for k, v in need.items())
    return (f"memory: {cluster.names[d]} overflows by {overflow} bytes ({format_size(overflow)}) "
            f"at t={format_time(time_us)} (capacity {format_size(cap)} = memory minus "
            f"{cluster.reserve:.0%} reserve) and moving nodes cannot fix it"
            f"{_holder_clause(graph, cluster, group, held)}; this graph "
            f"needs at least {format_size(max(need.values()))} per device ({parts}): "
            f"raise --memory, lower --reserve or add devices")

"""ParDNN Step 2, overflow repair (thesis §4.1.2, "Addressing Overflow", Eq. 4.4-4.5):
make every device's emulated memory fit its capacity, or say precisely why it cannot.

The pipeline's judge (pardnn.pipeline.judge) emulates a placement and, while some
device's peak exceeds `cluster.capacity` (memory minus the reserve), asks
`OverflowRepair.round` for a round of moves (pardnn.repair.repair_round): at each
overflow, the greedy two-heap min-knapsack picks colocation groups by move cost per
byte freed, and each goes to a device that can absorb it; then it emulates again,
once per round rather than once per move. The repair reads the emulation it is given
and imports no emulator.

Termination: a group that has moved is frozen, so each node moves at most once and
the rounds end. When a round can move nothing while a device still overflows, the
placement cannot be repaired: UserError with the device, the time, the overflow and
the least per-device memory the graph could need (`least_memory`). The same error
comes at once, before any move, when that least memory already rules the cluster out.
"""

from __future__ import annotations

import numpy as np

from pardnn.errors import UserError
from pardnn.graph import NORMAL
from pardnn.graph.constraints import allowed_devices
from pardnn.graph.node_memory import resident_bytes
from pardnn.repair.footprint import GroupLinks, distinct
from pardnn.repair.repair_round import RepairRound
from pardnn.units import format_size, format_time


class OverflowRepair:
    """The repair of one placement, round by round; `moved` marks the groups moved so far."""

    def __init__(self, graph, cluster, profile):
        """Starts on the emulated memory `profile` of a placement that overflows; UserError
        at once when `least_memory` rules the cluster out."""
        _fail_if_hopeless(graph, cluster, profile)
        self.graph, self.cluster = graph, cluster
        self.links, self.allowed = GroupLinks(graph, cluster), allowed_devices(graph, cluster)
        self.moved = np.zeros(graph.num_groups, bool)

    def round(self, device, schedule, profile) -> np.ndarray:
        """`device` (int32 per node) after one round of moves at the overflows of its
        emulation (`schedule`, `profile`); UserError when no move can fix them."""
        graph = self.graph
        step = RepairRound(graph, self.cluster, self.links, self.allowed, device, schedule, profile,
                           self.moved).run()
        if not step.moves:
            raise UserError(_message(graph, self.cluster, *step.stuck[0]))
        groups, targets = np.array(step.moves, np.int64).T
        group_dev = device[graph.group_nodes[graph.group_ptr[:-1]]]
        group_dev[groups] = targets
        self.moved[groups] = True
        return group_dev[graph.group].astype(np.int32)


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

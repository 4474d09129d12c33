"""ParDNN Step 2, overflow repair (thesis §4.1.2, "Addressing Overflow", Eq. 4.4-4.5):
make every device's emulated memory fit its capacity, or say precisely why it cannot.

The pipeline's judge (pardnn.pipeline.judge) emulates a placement and, while some
device's peak exceeds `cluster.capacity` (memory minus the reserve), asks
`OverflowRepair.round` for a round of moves (pardnn.repair.repair_round): at each
overflow, the greedy two-heap min-knapsack picks colocation groups by move cost per
byte freed, and each goes to a device that can absorb it; then it emulates again,
once per round rather than once per move. The repair reads the emulations it is
given and imports no emulator.

Termination: a group that has moved is frozen, so each node moves at most once and
the rounds end. When a round can move nothing while a device still overflows, the
complete search (pardnn.repair.exhaustive) takes over: on small graphs it tries every
placement within a work limit, judged by the emulations the judge lends it; where it
does not apply or ends at its limit, and the caller asks for it (the portfolio does
when no candidate fits otherwise), a local search (pardnn.repair.local_search) moves
groups one at a time, each move emulated. Only when neither finds a fit is there a
UserError with the device, the time, the overflow and the least
per-device memory the graph could need (`least_memory`); it says "no placement fits"
only when it has a proof (the search was complete, or that least memory already rules
the cluster out, which is checked before any move), and otherwise that pardnn found
none and the bound below which none exists.
"""

from __future__ import annotations

import numpy as np

from pardnn.base.errors import UserError
from pardnn.graph.constraints import allowed_devices
from pardnn.graph.node_memory import resident_bytes
from pardnn.repair import exhaustive, local_search
from pardnn.repair.footprint import GroupLinks
from pardnn.repair.least_memory import least_memory, least_memory_on
from pardnn.repair.repair_round import RepairRound
from pardnn.base.units import format_size, format_time


class RepairSetup:
    """What the repair of any placement of `graph` on `cluster` reads that no placement
    changes: the groups' links and resident state, the devices each may use, and whether
    `least_memory` rules the cluster out. Built once, it serves every repair there."""

    def __init__(self, graph, cluster):
        self.graph, self.cluster = graph, cluster
        self.allowed = allowed_devices(graph, cluster)
        self.links = GroupLinks(graph, cluster, self.allowed)
        self.hopeless = least_memory(graph, cluster.num_devices).ruled_out(cluster.capacity) is not None


class Stuck(UserError):
    """The repair found no placement that fits: `overflow`, the bytes over capacity where
    the greedy rounds stopped (how close this start came), for choosing where a local
    search is worth its work; `start`, the groups' devices there (int per group) when
    a repair without the local search stopped and the complete search left it open:
    a repair with it makes the same rounds and searches from there (None otherwise,
    and once sent between processes)."""

    def __init__(self, message, overflow, start=None):
        super().__init__(message)
        self.overflow = int(overflow)
        self.start = start

    def __reduce__(self):
        """Pickled with its overflow: a worker process sends it back to the portfolio
        (an exception pickles only its args, and unpickling without `overflow` fails)."""
        return Stuck, (str(self), self.overflow)


class OverflowRepair:
    """The repair of one placement, round by round; `moved` marks the groups moved so far."""

    def __init__(self, setup: RepairSetup, profile, emulate, search=False):
        """Starts on the emulated memory `profile` of a placement that overflows; UserError
        at once when `least_memory` rules the cluster out. `emulate(device)` gives the
        (schedule, memory profile) of a placement (int per node), for the complete search
        and the local search, which runs only with `search`."""
        graph, cluster = setup.graph, setup.cluster
        if setup.hopeless:
            d = int(np.argmax(profile.peak_bytes - cluster.capacity))
            raise UserError(_message(graph, cluster, d, float(profile.peak_time_us[d]),
                                     int(profile.peak_bytes[d] - cluster.capacity[d]), proved=True))
        self.graph, self.cluster, self.emulate, self.search = graph, cluster, emulate, search
        self.links, self.allowed = setup.links, setup.allowed
        self.moved = np.zeros(graph.num_groups, bool)

    def round(self, device, schedule, profile) -> np.ndarray:
        """`device` (int32 per node) after one round of moves at the overflows of its
        emulation (`schedule`, `profile`); when no move helps, a placement that fits
        found by the complete search, or, where that is not complete and `search` was
        asked for, by the local search; UserError when neither finds one."""
        graph = self.graph
        step = RepairRound(graph, self.cluster, self.links, self.allowed, device, schedule, profile,
                           self.moved).run()
        group_dev = np.asarray(device, np.int64)[graph.group_nodes[graph.group_ptr[:-1]]]
        if step.moves:
            groups, targets = np.array(step.moves, np.int64).T
            self.moved[groups] = True
            group_dev[groups] = targets
        else:
            found = exhaustive.search(graph, self.cluster, group_dev, self.allowed,
                                      lambda trial: self.emulate(trial)[1].peak_bytes)
            fit = found.group_device
            if fit is None and not found.complete and self.search:
                fit = local_search.descend(graph, self.cluster, group_dev, self.allowed, self.emulate)
            if fit is None:
                start = group_dev if not found.complete and not self.search else None
                raise Stuck(_message(graph, self.cluster, *step.stuck[0], search=found), step.stuck[0][2], start)
            self.moved |= fit != group_dev
            group_dev = fit
        return group_dev[graph.group].astype(np.int32)


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
    need = least_memory_on(graph, cluster)
    cap = int(cluster.capacity[d])
    where = (f"{cluster.names[d]} overflows by {overflow} bytes ({format_size(overflow)}) "
             f"at t={format_time(time_us)} (capacity {format_size(cap)} = memory minus "
             f"{cluster.reserve:.0%} reserve){_holder_clause(graph, cluster, group, held)}")
    advice = "raise --memory, lower --reserve or add devices"
    if proved:
        return f"memory: no placement fits: this graph needs {need.shortfall(cluster.capacity)}; {where}: {advice}"
    if search is not None and search.complete:
        uniform = len(set(cluster.capacity.tolist())) == 1
        least = (f" (none fits below {format_size(cap + search.least_overflow)} per device)"
                 if uniform else "")
        return (f"memory: no placement fits: the complete search ruled out every placement of the "
                f"{graph.num_groups} colocation groups ({search.emulated} emulated, the rest by their "
                f"working sets); each overflows a device by at least {search.least_overflow} bytes{least}; "
                f"{where}: {advice}")
    return (f"memory: pardnn found no placement within {format_size(cap)} per device; the bound below "
            f"which none exists is {need.describe()}; {where}: {advice}")

"""Least memory: lower bounds on the memory per device that any placement needs under
the emulator's model (pardnn.emulator.memory), each proved in docs/bounds.md ("Least
memory"). What `pardnn place` and `pardnn capacity` print and report.json holds
(`least_memory`), what the repair's messages cite and its complete search
(pardnn.repair.exhaustive) prunes with.

Two kinds of bound, so that devices of unequal memory are covered too:
- *one device*: some device must hold this much at some instant, so the largest
  capacity must be at least it: the largest colocation group's resident state; the
  largest op's working set (pardnn.repair.working_sets); the pigeonhole packing of
  the groups with the most resident state (of any j K + 1 of them, some device holds
  j + 1, with the transient the one updated there needs); the best packing of the
  groups with the most state and transients, every assignment of them tried;
- *all devices together*: at some instant the devices hold this much between them,
  so the sum of the capacities must be at least it: the total resident state, and the
  resident state plus the tensors alive at once at the start of an op
  (pardnn.repair.live_at_once) plus that op's own needs; and the same for the tensors
  no recomputation makes again at the start of a backward op ("kept at once"), the
  form that holds whatever the recompute lever does (`LeastMemory.recomputing`).

For K devices of one memory, the least memory is the largest one-device bound and
each all-devices bound over K, rounded up. On a cluster with a host tier
(`least_memory_on`) the host keeps its own memory (`--host-memory`) and the least
memory is that of the other devices (the ones `--memory` sets) beside it: a one-device
bound the host holds asks nothing of them, and an all-devices bound asks them for what
the host does not hold, over their count. `LeastMemory.ruled_out(capacities)` tests
any list of capacities. The bounds are computed once per graph and device count
(CostGraph.memo).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, replace

import numpy as np

from pardnn.repair.live_at_once import held_at_once, kept_at_once
from pardnn.repair.working_sets import group_resident, op_needs, working_sets
from pardnn.base.units import format_size

PIGEONHOLE_WORK = 200_000   # heap operations the pigeonhole packing may take (a few seconds at most)
PACKING_WORK = 100_000      # partial packings the exhaustive packing may try before it gives up
PACKING_MAX_GROUPS = 64     # groups the exhaustive packing takes, those with the most state and transients
KEEPS_ACTIVATIONS = ("live at once",)   # bounds that assume every activation is kept (not recomputed)


@dataclass(frozen=True)
class Bound:
    """One proven bound: `bytes` held by one device (`alone`) or all together."""

    name: str       # what it is, e.g. "live tensors at once"
    bytes: int
    alone: bool     # True: one device holds it; False: the devices together
    what: str       # what binds it: the group, op or instant, in words


@dataclass(frozen=True)
class LeastMemory:
    """The bounds for `k` devices; `bytes` is the least usable memory per device of K
    equal devices or, with `host_tier` ((device index, usable bytes) of each host-tier
    device, which keeps its own memory), of each of the other k - len(host_tier)
    devices beside them; `binding` the bound that gives it."""

    k: int
    bounds: tuple
    host_tier: tuple = ()

    @property
    def host_bytes(self) -> int:
        """The usable memory of the host-tier devices together (0 without them)."""
        return sum(c for _, c in self.host_tier)

    def per_device(self, bound: Bound) -> int:
        """What `bound` asks of each device that shares one memory: beside the host
        tier, nothing for a one-device bound the largest host-tier device holds, and for
        an all-devices bound what the host tier does not hold, over the other devices."""
        if not self.host_tier:
            return bound.bytes if bound.alone else -(-bound.bytes // max(self.k, 1))
        if bound.alone:
            return 0 if max(c for _, c in self.host_tier) >= bound.bytes else bound.bytes
        return max(0, -(-(bound.bytes - self.host_bytes) // (self.k - len(self.host_tier))))

    @property
    def binding(self) -> Bound:
        return max(self.bounds, key=self.per_device)

    @property
    def bytes(self) -> int:
        return self.per_device(self.binding) if self.bounds else 0

    def recomputing(self) -> "LeastMemory":
        """The bounds that hold whatever is recomputed: those that count only resident
        state and one op's working set (a recomputed op's copy has the same), without
        the ones that keep every activation until the backward pass reads it
        (`KEEPS_ACTIVATIONS`)."""
        return replace(self, bounds=tuple(b for b in self.bounds if b.name not in KEEPS_ACTIVATIONS))

    def fields(self) -> dict | None:
        """report.json's `least_memory`: bytes, binding bound, every bound per device;
        None when no bound applies (a graph that holds nothing, e.g. no nodes)."""
        if not self.bounds:
            return None
        b = self.binding
        host = {"host_bytes": self.host_bytes} if self.host_tier else {}
        return {"bytes": self.bytes, "binding": b.name, "what": b.what,
                "bounds": {x.name: self.per_device(x) for x in self.bounds}, **host}

    def describe(self) -> str:
        """One line: the bound and what binds it."""
        b = self.binding
        if not self.host_tier:
            per = "" if b.alone else f" over {self.k} devices"
            return f"{format_size(self.bytes)} per device ({b.name}{per}: {b.what})"
        host = f"the host's {format_size(self.host_bytes)}"
        if self.bytes == 0:
            return f"0 B per device beside {host}, which holds what every bound asks"
        n = self.k - len(self.host_tier)
        per = "" if b.alone else f", {format_size(b.bytes)} over {n} device{'s' * (n != 1)} and the host"
        return f"{format_size(self.bytes)} per device beside {host} ({b.name}{per}: {b.what})"

    def shortfall(self, capacity) -> str:
        """What devices of these capacities lack, naming the bound that rules them out
        ("" when none does): when the devices that share one memory (all, or those
        beside the host tier) have equal capacities, "at least" the least memory per
        device and what binds it."""
        b = self.ruled_out(capacity)
        if b is None:
            return ""
        host = {d for d, _ in self.host_tier}
        if len({int(c) for d, c in enumerate(np.asarray(capacity).tolist()) if d not in host}) == 1:
            return f"at least {self.describe()}"
        where = "on one device, more than the largest holds" if b.alone else "on all devices together, more than they hold"
        return f"{format_size(b.bytes)} {where} ({b.name}: {b.what})"

    def ruled_out(self, capacity):
        """The bound that no placement on devices of these capacities (bytes each) can
        meet, or None: a one-device bound above the largest, or an all-devices bound
        above their sum."""
        capacity = np.asarray(capacity, np.int64)
        if len(capacity) == 0:
            return None
        for b in sorted(self.bounds, key=lambda x: -self.per_device(x)):
            if b.bytes > (int(capacity.max()) if b.alone else int(capacity.sum())):
                return b
        return None


def least_memory(graph, k: int) -> LeastMemory:
    """The bounds for `k` devices (module docstring), kept in the graph's memo."""
    return graph.memoized(("least_memory", int(k)), lambda: _bounds(graph, int(k)))


def least_memory_on(graph, cluster) -> LeastMemory:
    """`least_memory` for the devices of `cluster`: beside its host tier, at the host's
    own usable memory, when it has one and other devices (module docstring)."""
    need = least_memory(graph, cluster.num_devices)
    host = [d for d, device in enumerate(cluster.devices) if device.host_tier]
    if not host or len(host) == cluster.num_devices:
        return need
    capacity = cluster.capacity
    return replace(need, host_tier=tuple((d, int(capacity[d])) for d in host))


def _bounds(graph, k) -> LeastMemory:
    res = group_resident(graph)
    needs = op_needs(graph, res)
    extra, work = needs[0], working_sets(graph, res, needs)
    bounds = []
    if graph.num_groups:
        g = int(np.argmax(res))
        bounds.append(Bound("largest colocation group", int(res[g]), True, _group_name(graph, g)))
        bounds.append(Bound("total resident", int(res.sum()), False, f"{graph.num_groups} colocation groups"))
    if graph.num_nodes and work.max() > 0:
        n = int(np.argmax(work))
        bounds.append(Bound("largest op working set", int(work[n]), True, f"op {graph.names[n]!r}"))
    group_extra = np.zeros(graph.num_groups, np.int64)
    np.maximum.at(group_extra, graph.group, extra)
    exact = packed_exactly(res, group_extra, k)
    packed = pigeonhole(res, group_extra, k)
    if exact is not None and (packed is None or exact[0] > packed[0]):
        bounds.append(Bound("groups packed", exact[0], True,
                            f"the best packing of the {exact[1]} colocation groups with the most state and "
                            f"transients, every one tried"))
    elif packed is not None:
        bounds.append(Bound("groups packed", packed[0], True,
                            f"{packed[1]} of the {packed[2]} largest colocation groups on one device"))
    op, held = graph.memoized("held_at_once", lambda: held_at_once(graph))
    if op >= 0:
        bounds.append(Bound("live at once", int(res.sum()) + held, False,
                            f"at the start of op {graph.names[op]!r}"))
    op, kept = graph.memoized("kept_at_once", lambda: kept_at_once(graph))
    if op >= 0:
        bounds.append(Bound("kept at once", int(res.sum()) + kept, False,
                            f"tensors no recomputation makes again, at the start of op {graph.names[op]!r}"))
    return LeastMemory(k, tuple(bounds))


def _group_name(graph, g) -> str:
    members = graph.group_members(g)
    from pardnn.graph.node_memory import resident_bytes
    name = graph.names[members[np.argmax(resident_bytes(graph)[members])]]
    return f"the colocation group of {name!r} ({len(members)} nodes)"


def pigeonhole(res, extra, k):
    """(bytes, j + 1, j k + 1) of the best pigeonhole packing bound, or None: among the
    j k + 1 groups with the most resident state, some device holds j + 1, and so at
    least the least, over sets S of j + 1 of them, of res(S) + max extra(S)."""
    order = np.lexsort((np.arange(len(res)), -res))
    best = None
    j = 1
    while j * k + 1 <= len(res) and (j * k + 1) * j <= PIGEONHOLE_WORK:
        top = order[:j * k + 1]
        value = _least_set(res[top], extra[top], j + 1)
        if best is None or value > best[0]:
            best = (value, j + 1, j * k + 1)
        j += 1
    return best


def _least_set(res, extra, size) -> int:
    """min over sets S of `size` items of res(S) + max extra(S): for each item i as the
    one with the largest extra, the size - 1 smallest res among items before it in
    increasing extra."""
    order = np.lexsort((res, extra))
    res, extra = res[order].tolist(), extra[order].tolist()
    heap, total, best = [], 0, None      # max-heap (negated) of the size - 1 smallest res so far
    for i in range(len(res)):
        if len(heap) == size - 1:
            value = total + res[i] + extra[i]
            best = value if best is None else min(best, value)
        if size - 1 == 0:
            continue
        if len(heap) < size - 1:
            heapq.heappush(heap, -res[i])
            total += res[i]
        elif res[i] < -heap[0]:
            total += res[i] + heapq.heappushpop(heap, -res[i])
    return int(best)


def packed_exactly(res, extra, k, limit=PACKING_WORK):
    """(bytes, groups) of the least, over every assignment of some groups to k devices,
    of the largest res(S) + max extra(S) over the devices (each device's groups S), or
    None. The groups packed are the PACKING_MAX_GROUPS with the most res + extra (ties:
    lower id), or all of them when fewer have any: every placement of the whole graph
    places these, so their best packing is a bound too. When the search needs more than
    `limit` partial assignments, the half of them with the most is packed instead,
    down to k + 1 groups (None below that: one group per device proves no more than
    the largest group)."""
    res, extra = np.asarray(res, np.int64), np.asarray(extra, np.int64)
    some = np.flatnonzero((res != 0) | (extra != 0))
    if len(some) == 0 or k < 1:
        return None
    some = some[np.lexsort((some, -(res[some] + extra[some])))]
    if len(some) <= k:
        return int((res[some] + extra[some]).max()), len(some)
    count = min(len(some), PACKING_MAX_GROUPS)
    while count > k:
        items = [(int(res[i]), int(extra[i])) for i in some[:count]]
        found = _best_packing(sorted(items, key=lambda x: (-(x[0] + x[1]), x)), k, limit)
        if found is not None:
            return found, count
        count //= 2
    return None


def _best_packing(items, k, limit):
    """The least largest need over every assignment of `items` ((res, extra), largest
    first) to k devices, or None when the search needs more than `limit` partial
    assignments. Depth-first; devices are interchangeable here, so of the empty ones
    only the first is tried; a branch stops once its largest need reaches the best found."""
    held, peak = [0] * k, [0] * k
    best = [_greedy_packing(items, k)]
    work = [0]

    def descend(i, worst):
        if worst >= best[0]:
            return True
        if i == len(items):
            best[0] = worst
            return True
        r, e = items[i]
        tried_empty = False
        for d in range(k):
            empty = held[d] == 0 and peak[d] == 0
            if empty and tried_empty:
                continue
            tried_empty |= empty
            work[0] += 1
            if work[0] > limit:
                return False
            saved = peak[d]
            held[d] += r
            peak[d] = max(saved, e)
            done = descend(i + 1, max(worst, held[d] + peak[d]))
            held[d] -= r
            peak[d] = saved
            if not done:
                return False
        return True

    return best[0] if descend(0, 0) else None


def _greedy_packing(items, k) -> int:
    """The largest need of the greedy packing (each group where the need grows least)."""
    held, peak = [0] * k, [0] * k
    for r, e in items:
        d = min(range(k), key=lambda i: (held[i] + r + max(peak[i], e), i))
        held[d] += r
        peak[d] = max(peak[d], e)
    return max(h + p for h, p in zip(held, peak))

"""What one op holds on its device at the instant it starts, whatever the placement,
under the emulator's memory model (pardnn.emulator.memory; proofs in docs/bounds.md,
"Least memory").

An op n that takes time (comp_us > 0, so it finishes after it starts) holds on its
device at its start: its own output (a NORMAL node's, allocated then) and scratch, and
each input tensor, either the producer's own buffer (the producer is on n's device and
n has not finished) or a received copy on n's device (it has arrived and n has not
finished). Which of the two is not known before the placement, so an input counts the
smaller. Its group's resident state is on that device too. A producer in another group
G is on n's device exactly when all of G is: then G's resident state and G's NORMAL
outputs that n reads are there; else copies of what n reads from G. So G counts the
smaller of the two, as a whole.

Ops that take no time are left out: at one instant the emulator frees before it
allocates, so their inputs may be gone when their output appears.
"""

from __future__ import annotations

import numpy as np

from pardnn.graph import NORMAL
from pardnn.graph.live_tensors import copy_floor, own_bytes
from pardnn.graph.node_memory import resident_bytes


def group_resident(graph):
    """Resident bytes per colocation group (held all step wherever it goes)."""
    return sums(graph.group, resident_bytes(graph), graph.num_groups)


def op_needs(graph, group_res=None):
    """(extra, foreign) per node, bytes held on its device when it starts (0 for ops
    taking no time): `extra`, what no group's resident state holds (own output,
    scratch, NORMAL inputs: its own group's outputs, and from another group the
    smaller of that group's outputs it reads and copies of what it reads); `foreign`,
    what the inputs from other groups add when their resident state is counted too
    (the smaller of resident state plus outputs, and copies, minus the part in
    `extra`). `extra` is what a device holds beyond the resident state of the groups
    on it; res(own group) + extra + foreign is the op's whole working set."""
    group_res = group_resident(graph) if group_res is None else group_res
    n, groups = graph.num_nodes, max(graph.num_groups, 1)
    timed = graph.comp_us > 0
    data = np.flatnonzero((graph.edge_slot >= 0) & timed[graph.edge_dst])
    floor = copy_floor(graph)[data]
    src, dst = graph.edge_src[data].astype(np.int64), graph.edge_dst[data].astype(np.int64)
    slot = graph.edge_slot[data].astype(np.int64)
    tensor = np.lexsort((slot, src, dst))                   # one copy per tensor (src, slot) read
    tensor = tensor[distinct_rows(dst[tensor], src[tensor], slot[tensor])]
    producer = np.lexsort((src, dst))                       # one own buffer per producer read
    producer = producer[distinct_rows(dst[producer], src[producer])]
    producer = producer[graph.kind[src[producer]] == NORMAL]
    # per (reader, source group): bytes of copies, bytes of NORMAL outputs
    key_copy = dst[tensor] * groups + graph.group[src[tensor]]
    key_out = dst[producer] * groups + graph.group[src[producer]]
    keys = np.sort(np.concatenate([key_copy, key_out]))   # np.unique hashes: far slower in numpy 2
    keys = keys[distinct_rows(keys)]
    copies = sums(np.searchsorted(keys, key_copy), floor[tensor], len(keys))
    outs = sums(np.searchsorted(keys, key_out), graph.out_bytes[src[producer]], len(keys))
    reader, source = keys // groups, keys % groups
    own = source == graph.group[reader]
    extra_in = np.where(own, outs, np.minimum(outs, copies))
    whole = np.where(own, outs, np.minimum(outs + group_res[source], copies))
    extra = sums(reader, extra_in, n) + own_bytes(graph)
    foreign = sums(reader, whole - extra_in, n)
    return np.where(timed, extra, 0), np.where(timed, foreign, 0)


def sums(index, values, size) -> np.ndarray:
    """Integer sums of `values` by `index` (exact, unlike bincount's float64)."""
    total = np.zeros(size, np.int64)
    np.add.at(total, index, np.asarray(values, np.int64))
    return total


def distinct_rows(*columns) -> np.ndarray:
    """Mask of the first of each run of equal rows in columns sorted together."""
    if len(columns[0]) == 0:
        return np.zeros(0, bool)
    first = np.zeros(len(columns[0]), bool)
    first[0] = True
    for col in columns:
        first[1:] |= col[1:] != col[:-1]
    return first


def working_sets(graph, group_res=None, needs=None):
    """Bytes per node held on its device at the instant it starts (0 for ops that take
    no time), its group's resident state included: see the module docstring. `needs`:
    op_needs(graph, group_res), when the caller has it."""
    group_res = group_resident(graph) if group_res is None else group_res
    extra, foreign = op_needs(graph, group_res) if needs is None else needs
    return np.where(graph.comp_us > 0, group_res[graph.group] + extra + foreign, 0)

"""Lower bounds on the memory a device needs under the emulator's model, whatever the
placement (docs/repair.md): what the repair's messages cite, and what the complete
search (pardnn.repair.exhaustive) prunes with."""

import numpy as np

from pardnn.graph import NORMAL
from pardnn.graph.node_memory import resident_bytes
from pardnn.repair.footprint import distinct


def least_memory(graph, k: int) -> dict:
    """Lower bounds (bytes) on the memory some device needs under the emulator's model,
    whatever the placement: the largest colocation group's resident state; the total
    resident state shared over k devices; the largest working set of one op, held at
    the instant it starts: its group's resident state, its own output and scratch, and each input
    from a NORMAL producer (the smaller of the producer's output and the bytes sent,
    as the input is either that output or a received copy). Ops that take no time are
    left out (their buffers may live for zero time), as are inputs from variables and
    references (they alias resident state another group may already count)."""
    group_res = group_resident(graph)
    return {"largest colocation group": int(group_res.max(initial=0)),
            "total resident / K": int(-(-int(group_res.sum()) // k)),
            "largest op working set": int(working_sets(graph, group_res).max(initial=0))}


def working_sets(graph, group_res):
    """Bytes per node held on its device at the instant it starts (0 for ops that take
    no time), its group's resident state included: see `least_memory`."""
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


def group_resident(graph):
    """Resident bytes per colocation group (held all step wherever it goes)."""
    return np.bincount(graph.group, resident_bytes(graph), minlength=graph.num_groups).astype(np.int64)

"""Emulation of TensorFlow's executor: start and finish time of every node (thesis §4.1.2,
"Scheduler Emulator").

The thesis models TF's scheduler as in-degree counting plus a FIFO ready queue: a node
whose inputs have all arrived is pushed to its device's queue, and the device runs the
queued nodes in the order they became ready. Modelling choices, each a simplification
of the real executor that the thesis makes or leaves open:

- One op at a time per device, running for its profiled `comp_us`; a device never idles
  while its queue holds a node (work-conserving). TF runs independent kernels on a
  thread pool / one compute stream, so per-device serial execution is the usual model.
- A node becomes ready on its device when its last input arrives: a same-device input
  when its producer finishes, a cross-device input when its transfer lands. Control
  edges count like data edges (TF sends a zero-byte tensor across devices for them).
- FIFO order is the order of ready times; nodes ready at the same instant queue in
  node-id (topological) order, so the emulation is deterministic.
- A tensor (producer, output slot) is sent once per destination device however many
  consumers it has there (TF's Send/Recv pairs are per tensor and device), as soon as
  its producer finishes. The transfer costs `latency + bytes / bandwidth` of that
  device pair (pardnn.hardware.cluster).
- Transfers overlap with computation on both ends. Transfers on one directed link
  (source device, destination device) are serialised in the order they were issued:
  the link is busy for `bytes / bandwidth`, and the latency is a pipeline delay that
  does not occupy it. The thesis leaves this open; serialising per link stops a burst
  of simultaneous sends from all enjoying the full bandwidth at once, which is what a
  single copy engine per direction does on GPUs. Links between different pairs are
  independent (no shared-switch contention).
- Node overheads (kernel launch, executor bookkeeping) are assumed to be part of the
  profiled `comp_us`.
- On a device of another speed (the host beside GPUs), an op runs for its `comp_us`
  times that device's time scale for the op's class (pardnn.graph.op_rates); on a
  cluster whose devices all have rate 1 the loop gets `comp_us` itself.

Cost: one discrete-event pass with a binary heap of ready and finish events,
O((V + E) log V), compiled (pardnn.emulator.event_loop).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pardnn.base.compiled import INTERPRETED_BELOW, kernel
from pardnn.emulator.event_loop import Successors, Transfers, event_loop
from pardnn.graph.op_rates import node_times


@dataclass(frozen=True, eq=False)
class Schedule:
    """The emulated timeline of one step; times in microseconds from the step's start."""

    start: np.ndarray           # float64 per node
    finish: np.ndarray          # float64 per node
    busy_us: np.ndarray         # float64 per device: total compute time run there
    edge_transfer: np.ndarray   # int64 per edge: its transfer's index, -1 on one device
    transfer_edge: np.ndarray   # int64 per transfer: the first edge carrying the tensor
    transfer_dst: np.ndarray    # int32 per transfer: destination device
    transfer_bytes: np.ndarray  # int64 per transfer
    transfer_send: np.ndarray   # float64 per transfer: when it got its link
    transfer_arrival: np.ndarray  # float64 per transfer: when it landed

    @property
    def makespan(self) -> float:
        return float(self.finish.max()) if len(self.finish) else 0.0


def plan_transfers(graph, cluster, device):
    """Group cross-device edges into transfers, one per (producer, slot, destination).

    Returns (edge_transfer, transfer_edge, link, occupancy_us, latency_us) where link is
    src_device * K + dst_device. Transfers are numbered by (producer, slot, destination);
    each takes its bytes from its first edge, as pardnn.graph.edge_costs.transfers does.
    Graphs of INTERPRETED_BELOW nodes or more number them with the compiled kernel
    `_numbered`, smaller ones with numpy (`_numbered_by_sort`): the same numbers."""
    k = cluster.num_devices
    device = np.asarray(device, np.int64)
    if graph.num_nodes < INTERPRETED_BELOW:
        edge_transfer, transfer_edge = _numbered_by_sort(graph, device, k)
    else:
        edge_transfer, transfer_edge = _numbered.compiled(
            *graph.successor_arrays, np.asarray(graph.edge_slot, np.int64), device, k)
    link = device[graph.edge_src[transfer_edge]] * k + device[graph.edge_dst[transfer_edge]]
    occupancy = graph.edge_bytes[transfer_edge] / cluster.bandwidth.ravel()[link]
    return edge_transfer, transfer_edge, link, occupancy, cluster.latency_us.ravel()[link].astype(float)


def _numbered_by_sort(graph, device, k):
    """(edge_transfer, transfer_edge): each cross-device edge's transfer, -1 for the
    others, and each transfer's first edge, transfers in (producer, slot, destination) order."""
    ds, dd = device[graph.edge_src], device[graph.edge_dst]
    cross = np.flatnonzero(ds != dd)
    edge_transfer = np.full(graph.num_edges, -1, np.int64)
    if len(cross) == 0:
        return edge_transfer, cross.astype(np.int64)
    slot = graph.edge_slot[cross].astype(np.int64, copy=False) + 1
    key = (graph.edge_src[cross].astype(np.int64, copy=False) * (int(slot.max()) + 1) + slot) * k + dd[cross]
    order = np.argsort(key, kind="stable")
    first = np.ones(len(order), bool)
    first[1:] = key[order[1:]] != key[order[:-1]]
    edge_transfer[cross[order]] = np.cumsum(first) - 1
    return edge_transfer, cross[order[first]].astype(np.int64)


@kernel
def _numbered(succ_ptr, edge_dst, edge_slot, device, k):
    """`_numbered_by_sort`'s numbers in one pass over the CSR edges (sorted by producer):
    each producer's cross-device edges sorted by (slot, destination, edge id), packed in
    one int64 key (below 2**63 while (slots + 1) * devices * edges is: 10**14 for a
    thousand slots, a thousand devices and 10**8 edges)."""
    n, m = succ_ptr.shape[0] - 1, edge_dst.shape[0]
    edge_transfer = np.full(m, -1, np.int64)
    transfer_edge = np.empty(m, np.int64)
    keys = np.empty(m, np.int64)
    count = 0
    for u in range(n):
        c = 0
        for e in range(succ_ptr[u], succ_ptr[u + 1]):
            dst_device = device[edge_dst[e]]
            if dst_device != device[u]:
                keys[c] = ((edge_slot[e] + 1) * k + dst_device) * m + e
                c += 1
        if c > 16:
            keys[:c].sort()
        else:                                   # insertion sort: most producers have few
            for i in range(1, c):
                key, j = keys[i], i - 1
                while j >= 0 and keys[j] > key:
                    keys[j + 1] = keys[j]
                    j -= 1
                keys[j + 1] = key
        previous = -1
        for i in range(c):
            e = keys[i] % m
            if keys[i] // m != previous:
                previous = keys[i] // m
                transfer_edge[count] = e
                count += 1
            edge_transfer[e] = count - 1
    return edge_transfer, transfer_edge[:count].copy()


def simulate(graph, cluster, device, priority=None) -> Schedule:
    """Emulate one training step of `graph` placed by `device` (int per node) on `cluster`;
    with `priority` (an int rank per node), each device runs its ready node of the
    lowest rank first instead of the first ready (list scheduling: the order a
    placement can carry, pardnn.graph.order)."""
    device = np.asarray(device, np.int64)
    ranks = np.zeros(0, np.int64) if priority is None else np.asarray(priority, np.int64)
    edge_transfer, transfer_edge, link, occupancy, latency = plan_transfers(graph, cluster, device)
    f64, i64 = np.float64, np.int64                  # the compiled loop's dtypes
    comp = node_times(graph, cluster, device)
    start, finish, send, arrival = event_loop.for_size(graph.num_nodes)(
        cluster.num_devices, np.asarray(comp, f64), device, np.diff(graph.pred_ptr).astype(i64),
        Successors(*graph.successor_arrays, edge_transfer),
        Transfers(np.asarray(link, i64), np.asarray(occupancy, f64), np.asarray(latency, f64)), ranks)
    return Schedule(
        start=start, finish=finish,
        busy_us=np.bincount(device, comp, minlength=cluster.num_devices),
        edge_transfer=edge_transfer, transfer_edge=transfer_edge,
        transfer_dst=device[graph.edge_dst[transfer_edge]].astype(np.int32),
        transfer_bytes=graph.edge_bytes[transfer_edge], transfer_send=send,
        transfer_arrival=arrival)

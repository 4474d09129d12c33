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

Cost: one discrete-event pass with a binary heap of ready and finish events,
O((V + E) log V). The loop runs over Python lists, not numpy scalars, for speed.
"""

from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass

import numpy as np


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
    each takes its bytes from its first edge, as pardnn.io.report.transfers does."""
    k = cluster.num_devices
    ds, dd = device[graph.edge_src], device[graph.edge_dst]
    cross = np.flatnonzero(ds != dd)
    edge_transfer = np.full(graph.num_edges, -1, np.int64)
    if len(cross) == 0:
        empty = np.zeros(0)
        return edge_transfer, cross.astype(np.int64), cross.astype(np.int64), empty, empty
    slot = graph.edge_slot[cross].astype(np.int64) + 1
    key = (graph.edge_src[cross].astype(np.int64) * (int(slot.max()) + 1) + slot) * k + dd[cross]
    _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    edge_transfer[cross] = inverse
    transfer_edge = cross[first]
    src_dev, dst_dev = ds[transfer_edge], dd[transfer_edge]
    occupancy = graph.edge_bytes[transfer_edge] / cluster.bandwidth[src_dev, dst_dev]
    return (edge_transfer, transfer_edge, src_dev.astype(np.int64) * k + dst_dev,
            occupancy, cluster.latency_us[src_dev, dst_dev].astype(float))


def simulate(graph, cluster, device) -> Schedule:
    """Emulate one training step of `graph` placed by `device` (int per node) on `cluster`."""
    device = np.asarray(device, np.int64)
    edge_transfer, transfer_edge, link, occupancy, latency = plan_transfers(graph, cluster, device)
    start, finish, send, arrival = _event_loop(graph, cluster.num_devices, device, edge_transfer,
                                               link, occupancy, latency)
    return Schedule(
        start=start, finish=finish,
        busy_us=np.bincount(device, graph.comp_us, minlength=cluster.num_devices),
        edge_transfer=edge_transfer, transfer_edge=transfer_edge,
        transfer_dst=device[graph.edge_dst[transfer_edge]].astype(np.int32),
        transfer_bytes=graph.edge_bytes[transfer_edge], transfer_send=send,
        transfer_arrival=arrival)


def _event_loop(graph, k, device, edge_transfer, link, occupancy, latency):
    """The discrete-event simulation proper; returns start, finish, send, arrival arrays.

    Heap entries are (time, key): key = node for a finish event and n + node for a
    ready event, so at equal times finishes come first and ties go by node id."""
    n = graph.num_nodes
    comp, dev = graph.comp_us.tolist(), device.tolist()
    ptr, dst, etr = graph.succ_ptr.tolist(), graph.edge_dst.tolist(), edge_transfer.tolist()
    lnk, occ, lat = link.tolist(), occupancy.tolist(), latency.tolist()
    indeg = np.diff(graph.pred_ptr).tolist()
    ready = [0.0] * n
    start, finish = [0.0] * n, [0.0] * n
    send, arrival = [0.0] * len(lnk), [-1.0] * len(lnk)
    link_free = [0.0] * (k * k)
    queues = [deque() for _ in range(k)]
    idle = [True] * k
    heap = [(0.0, n + v) for v in range(n) if indeg[v] == 0]
    push, pop = heapq.heappush, heapq.heappop
    while heap:
        t, key = pop(heap)
        if key >= n:                                    # node key - n is ready
            v = key - n
            d = dev[v]
            if idle[d]:
                idle[d] = False
                start[v] = t
                finish[v] = f = t + comp[v]
                push(heap, (f, v))
            else:
                queues[d].append(v)
            continue
        for e in range(ptr[key], ptr[key + 1]):         # node key finished at t
            v = dst[e]
            x = etr[e]
            if x < 0:
                a = t
            else:
                a = arrival[x]
                if a < 0.0:                             # first consumer there: send it
                    s = link_free[lnk[x]]
                    if s < t:
                        s = t
                    send[x] = s
                    link_free[lnk[x]] = s + occ[x]
                    arrival[x] = a = s + occ[x] + lat[x]
            if a > ready[v]:
                ready[v] = a
            c = indeg[v] - 1
            indeg[v] = c
            if c == 0:
                push(heap, (ready[v], n + v))
        q = queues[dev[key]]
        if q:
            v = q.popleft()
            start[v] = t
            finish[v] = f = t + comp[v]
            push(heap, (f, v))
        else:
            idle[dev[key]] = True
    return (np.asarray(start, float), np.asarray(finish, float),
            np.asarray(send, float), np.asarray(arrival, float))

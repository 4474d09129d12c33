"""The emulator's discrete-event loop (thesis §4.1.2, "Scheduler Emulator"), a kernel.

pardnn.emulator.scheduler states the model; this module runs it. Every candidate and
every refinement trial is judged by one pass of this loop, so it is the hottest code in
pardnn. It is a kernel (pardnn.base.compiled: compiled with numba on large graphs, run by
CPython on small ones) and works on flat arrays: a binary heap of (time, key) events in
two arrays, and each device's FIFO queue as a linked list through the nodes (a node is
queued at most once). The arithmetic is the same IEEE double arithmetic in the same
order as a plain Python loop would do, so schedules are bit-for-bit those of the
interpreted loop it replaced (docs/emulator.md gives the speed).

Heap keys: key = node for a finish event and n + node for a ready event. A node has at
most one event in the heap, so keys are unique and (time, key) is a total order: at equal
times finishes come first and ties go by node id.

Given a `priority` (an int64 rank per node; empty for TF's FIFO), a device that falls
free runs its queued node of the lowest rank instead of the first queued: list
scheduling, the emulation of an order a placement carries (pardnn.graph.order). Each
device's queue is then a binary heap of (rank, node) in its own region of one array.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from pardnn.base.compiled import kernel


class Successors(NamedTuple):
    """The graph's edges in CSR by producer, and each one's transfer."""

    ptr: np.ndarray         # int64, nodes + 1
    dst: np.ndarray         # int64 per edge
    transfer: np.ndarray    # int64 per edge: its transfer, or -1 (same device)


class Transfers(NamedTuple):
    """The step's transfers (pardnn.emulator.scheduler.plan_transfers)."""

    link: np.ndarray        # int64: src device * k + dst device
    occupancy: np.ndarray   # float64: how long it holds its link (bytes / bandwidth)
    latency: np.ndarray     # float64: added after it leaves the link


@kernel
def event_loop(k, comp, device, indegree, successors, transfers, priority):
    """Start and finish per node, send and arrival per transfer, of one emulated step.

    comp: float64 per node; device, indegree: int64 per node; the Successors and
    Transfers of the step; priority: int64 rank per node, or empty for FIFO."""
    succ_ptr, edge_dst, edge_transfer = successors
    link, occupancy, latency = transfers
    n, m = comp.shape[0], link.shape[0]
    pending = indegree.copy()
    ready, start, finish = np.zeros(n), np.zeros(n), np.zeros(n)
    send, arrival = np.zeros(m), np.full(m, -1.0)
    link_free = np.zeros(k * k)
    queue_next = np.full(n, -1, np.int64)
    queue_head, queue_tail = np.full(k, -1, np.int64), np.full(k, -1, np.int64)
    idle = np.ones(k, np.bool_)
    times, keys = np.empty(n + 1), np.empty(n + 1, np.int64)
    ranked = priority.shape[0] > 0
    region = np.zeros(k + 1, np.int64)                  # device d's heap: ranks[region[d]:...]
    if ranked:
        for v in range(n):
            region[device[v] + 1] += 1
        for d in range(k):
            region[d + 1] += region[d]
    queued = np.zeros(k, np.int64)
    qnode = np.empty(n if ranked else 0, np.int64)

    def before(a, b):
        """Whether node a goes before node b in a device's ranked queue."""
        return priority[a] < priority[b] or (priority[a] == priority[b] and a < b)

    def enqueue(d, v):
        """Queues v on device d (its FIFO list, or its heap by rank)."""
        if not ranked:
            if queue_tail[d] < 0:
                queue_head[d] = v
            else:
                queue_next[queue_tail[d]] = v
            queue_tail[d] = v
            return
        base, i = region[d], queued[d]
        queued[d] += 1
        while i > 0:
            parent = (i - 1) >> 1
            if not before(v, qnode[base + parent]):
                break
            qnode[base + i] = qnode[base + parent]
            i = parent
        qnode[base + i] = v

    def dequeue(d):
        """The next queued node of device d, removed; -1 when none."""
        if not ranked:
            v = queue_head[d]
            if v >= 0:
                queue_head[d] = queue_next[v]
                if queue_head[d] < 0:
                    queue_tail[d] = -1
            return v
        if queued[d] == 0:
            return -1
        base = region[d]
        top = qnode[base]
        queued[d] -= 1
        last, size, i = qnode[base + queued[d]], queued[d], 0
        while True:
            c = 2 * i + 1
            if c >= size:
                break
            if c + 1 < size and before(qnode[base + c + 1], qnode[base + c]):
                c += 1
            if not before(qnode[base + c], last):
                break
            qnode[base + i] = qnode[base + c]
            i = c
        if size > 0:
            qnode[base + i] = last
        return top

    def push(size, t, key):
        """Adds event (t, key) to the heap of `size` events; returns the new size."""
        i = size
        while i > 0:
            parent = (i - 1) >> 1
            if times[parent] < t or (times[parent] == t and keys[parent] < key):
                break
            times[i], keys[i] = times[parent], keys[parent]
            i = parent
        times[i], keys[i] = t, key
        return size + 1

    def pop(size):
        """Removes the earliest event (read it at index 0 first); returns the new size."""
        size -= 1
        t, key = times[size], keys[size]
        i = 0
        while True:
            c = 2 * i + 1
            if c >= size:
                break
            if c + 1 < size and (times[c + 1] < times[c] or (times[c + 1] == times[c] and keys[c + 1] < keys[c])):
                c += 1
            if t < times[c] or (t == times[c] and key < keys[c]):
                break
            times[i], keys[i] = times[c], keys[c]
            i = c
        times[i], keys[i] = t, key
        return size

    def send_at(t, x):
        """Issues transfer x at time t on its serialised link; returns its arrival."""
        s = max(link_free[link[x]], t)
        send[x] = s
        link_free[link[x]] = s + occupancy[x]
        return s + occupancy[x] + latency[x]

    size = 0
    for v in range(n):
        if pending[v] == 0:
            size = push(size, 0.0, n + v)
    while size > 0:
        t, key = times[0], keys[0]
        size = pop(size)
        if key >= n:                                    # node key - n is ready
            v = key - n
            d = device[v]
            if idle[d]:
                idle[d] = False
                start[v], finish[v] = t, t + comp[v]
                size = push(size, finish[v], v)
            else:                                       # queue it
                enqueue(d, v)
            continue
        for e in range(succ_ptr[key], succ_ptr[key + 1]):   # node key finished at t
            v, x = edge_dst[e], edge_transfer[e]
            a = t
            if x >= 0:
                a = arrival[x]
                if a < 0.0:                             # first consumer there: send it
                    a = arrival[x] = send_at(t, x)
            ready[v] = max(ready[v], a)
            pending[v] -= 1
            if pending[v] == 0:
                size = push(size, ready[v], n + v)
        d = device[key]
        v = dequeue(d)
        if v < 0:
            idle[d] = True
            continue
        start[v], finish[v] = t, t + comp[v]
        size = push(size, finish[v], v)
    return start, finish, send, arrival

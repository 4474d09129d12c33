"""m-ETF (Baechi, Jeon et al. 2020): earliest-task-first list scheduling with
per-device memory tracking.

ETF (Hwang et al. 1989) repeatedly starts, among all ready nodes and all devices,
the (node, device) pair with the earliest start time, where a node's start on a
device is the later of the device becoming free and its inputs arriving there
(`latency + bytes / bandwidth` from each producer on another device). Ties go to
the node with the larger static level (bottom level by compute), then the smaller
node id, then the smaller device index.

Memory (Baechi's m-ETF): a node may start on a device only if the device still has
room for its output and, for the first member of a colocation group, for the whole
group's resident state (persistent bytes and variables, as the emulator counts
them). A later member of a group already placed is not checked: it can go only to
its group's device, so it starts there as soon as the device is free, even past the
capacity (its output is counted all the same: the nodes checked after it see it held).
A NORMAL node's output is held from the node's start until its last data
consumer has been scheduled; outputs no data edge consumes are not held. Copies
received from other devices are not counted: ETF decides in start-time order, not
on a timeline, so this is an estimate that the emulator then checks. A node that fits nowhere waits
until memory is freed; if every ready node waits, the one that overflows its
device least is started anyway, so the placer always returns a placement and the
emulator reports it infeasible.

Devices of different speeds (the host beside GPUs, pardnn.graph.op_rates): a node runs
on device d for its compute time times d's time scale for its class, and the (node,
device) pair chosen is the one that *finishes* earliest (ties by priority, node and
device, as above), since the earliest start would go to the slow device that is always
idle: HEFT's rule, without insertion. On a cluster of
alike devices the choice is ETF's earliest start, as before.

Each device keeps its candidates in three heaps: nodes whose inputs arrive after the
device is free (`waiting`, keyed by arrival time), nodes ready to start the moment it
is free (`arrived`, keyed by priority) and nodes waiting for memory there (`blocked`,
keyed by the bytes they need), so a step costs O(K log V) and the whole run
O(V K log V + E K). The loop is a kernel (pardnn.base.compiled: compiled with numba on
large graphs, docs/data-structures.md), one function whose steps are inner functions:
numba inlines them and they share the arrays of the enclosing function, where
passing those arrays as arguments cost a reference count per array per call. The arrays arrive by name, in three named tuples
(Graph, Nodes, Devices), so none can be passed in the wrong place; run interpreted
(`_run.interpreted`), the same code is the readable twin tests/test_etf_kernel.py checks
the compiled loop against.
"""

import heapq
from typing import NamedTuple

import numpy as np

from pardnn.base.compiled import kernel
from pardnn.graph.constraints import allowed_devices
from pardnn.graph.levels import bottom_levels
from pardnn.graph.node_memory import resident_bytes, transient_bytes
from pardnn.placers.common import graph_arrays, link_tables


class Nodes(NamedTuple):
    """Per node: what the schedule and the memory tracking read."""

    comp: np.ndarray            # compute us
    negprio: np.ndarray         # minus the static level (smaller starts first)
    held: np.ndarray            # bytes held from its start until its last data consumer starts
    need: np.ndarray            # bytes it needs free to start on a device its group is not on yet
    consumers: np.ndarray       # its data consumers
    indegree: np.ndarray        # its in-edges
    rate_class: np.ndarray      # which row of Devices.time_scale its time scales by (pardnn.graph.op_rates)


class Devices(NamedTuple):
    """Per device, group or device pair: memory, where groups may go, links."""

    capacity: np.ndarray        # int64 per device
    allowed: np.ndarray         # bool (groups x devices)
    group_resident: np.ndarray  # bytes per group, held on its device from its first start
    latency: np.ndarray         # us (K x K)
    inv_bandwidth: np.ndarray   # us per byte (K x K)
    time_scale: np.ndarray      # (2 x K) a node's compute time is multiplied by on each device
    by_finish: bool             # devices differ in speed: choose the pair that finishes first


def place(graph, cluster, timings=None) -> np.ndarray:
    """Device per node (int32); the graph and cluster go to the compiled loop as arrays."""
    return _run.for_size(graph.num_nodes)(*arrays(graph, cluster)).astype(np.int32)


def arrays(graph, cluster) -> tuple:
    """(Graph, Nodes, Devices): what the loop reads, in the dtypes it is compiled for."""
    n, i64 = graph.num_nodes, np.int64
    data = graph.edge_slot >= 0
    consumers = np.bincount(graph.edge_src[data], minlength=n)
    held = np.where(consumers > 0, transient_bytes(graph), 0).astype(i64)
    resident = np.bincount(graph.group, weights=resident_bytes(graph), minlength=graph.num_groups).astype(float)
    lat, inv_bw = (np.asarray(t, np.float64) for t in link_tables(cluster))
    edges = graph_arrays(graph)
    nodes = Nodes(np.asarray(graph.comp_us, float), -bottom_levels(graph, graph.comp_us).astype(float), held,
                  resident[graph.group] + held, consumers.astype(i64), np.diff(graph.pred_ptr).astype(i64),
                  np.asarray(graph.rate_class, i64))
    devices = Devices(np.asarray(cluster.capacity, i64), allowed_devices(graph, cluster), resident, lat, inv_bw,
                      np.asarray(cluster.time_scale, np.float64), bool(cluster.mixed))
    return edges, nodes, devices


@kernel
def _run(g, nodes, devices):
    """Schedules every node; returns its device."""
    n, k = nodes.comp.shape[0], devices.latency.shape[0]
    pending, indegree = nodes.consumers.copy(), nodes.indegree.copy()
    device, finish, ready_at, is_ready = np.full(n, -1), np.zeros(n), np.zeros((n, k)), np.zeros(n, np.bool_)
    free_at, used, fixed = np.zeros(k), np.zeros(k), np.full(devices.group_resident.shape[0], -1)
    group, negprio, cap, scale = g.group, nodes.negprio, devices.capacity, devices.time_scale
    waiting = [[(0.0, 0.0, 0)] for _ in range(k)]       # (arrival, -prio, node)
    arrived = [[(0.0, 0, 0.0)] for _ in range(k)]       # (-prio, node, arrival)
    blocked = [[(0.0, 0.0, 0, 0.0)] for _ in range(k)]  # (bytes needed, -prio, node, arrival)
    for d in range(k):                                  # each heap typed by a first item, then emptied
        waiting[d].pop()
        arrived[d].pop()
        blocked[d].pop()

    def release(v):
        """v's inputs are all scheduled: its arrival time on every device, then queue it."""
        ready = ready_at[v]
        for p in range(g.pred_ptr[v], g.pred_ptr[v + 1]):
            u = g.pred_src[p]
            f, du, b = finish[u], device[u], g.edge_bytes[g.pred_eid[p]]
            for d in range(k):
                ready[d] = max(ready[d], f + devices.latency[du, d] + b * devices.inv_bandwidth[du, d])
        is_ready[v] = True
        for d in range(k):
            if fixed[group[v]] == d or (fixed[group[v]] < 0 and devices.allowed[group[v], d]):
                if ready[d] <= free_at[d]:                  # arrived already: skip the waiting heap
                    heapq.heappush(arrived[d], (negprio[v], v, ready[d]))
                else:
                    heapq.heappush(waiting[d], (ready[d], negprio[v], v))

    def fits(v, d):
        """May v start on d now? If it could once memory is freed there, block it on d."""
        f = fixed[group[v]]
        if device[v] >= 0 or (f >= 0 and f != d):
            return False
        if f == d or used[d] + nodes.need[v] <= cap[d]:
            return True
        heapq.heappush(blocked[d], (nodes.need[v], negprio[v], v, ready_at[v, d]))
        return False

    def best(d):
        """(found, start, -prio, node) of the node device d would start next. Tops of d's
        heaps that cannot start there now are popped (and blocked, by `fits`)."""
        wait, arrive, free = waiting[d], arrived[d], free_at[d]
        while wait and wait[0][0] <= free:
            ready, prio, v = heapq.heappop(wait)
            heapq.heappush(arrive, (prio, v, ready))
        while arrive:
            prio, v, _ = arrive[0]
            if fits(v, d):
                return True, free, prio, v
            heapq.heappop(arrive)
        while wait:
            ready, prio, v = wait[0]
            if fits(v, d):
                return True, ready, prio, v
            heapq.heappop(wait)
        return False, 0.0, 0.0, 0

    def force():
        """Every ready node waits for memory: (start, node, device) of the one that
        overflows its device least."""
        found, over, prio, v, start, d = False, 0.0, 0.0, 0, 0.0, 0
        for e in range(k):
            heap = blocked[e]
            while heap and (device[heap[0][2]] >= 0 or fixed[group[heap[0][2]]] not in (-1, e)):
                heapq.heappop(heap)                         # placed, or its group is fixed elsewhere
            if heap:
                bytes_needed, c_prio, c_v, ready = heap[0]
                c_over = used[e] + bytes_needed - cap[e]
                if not found or (c_over, c_prio, c_v) < (over, prio, v):
                    found, over, prio, v, start, d = True, c_over, c_prio, c_v, max(ready, free_at[e]), e
        return start, v, d

    def unblock(d):
        """Memory was freed on d: requeue the blocked nodes that now fit."""
        heap = blocked[d]
        while heap and used[d] + heap[0][0] <= cap[d]:
            _, prio, v, ready = heapq.heappop(heap)
            if device[v] < 0:
                heapq.heappush(waiting[d], (ready, prio, v))

    def fix_group(grp, d):
        """The group's first member starts on d: hold its resident state there, and queue
        its ready members on d again (they may have been blocked there for memory)."""
        fixed[grp] = d
        used[d] += devices.group_resident[grp]
        for i in range(g.group_ptr[grp], g.group_ptr[grp + 1]):
            m = g.group_nodes[i]
            if is_ready[m]:
                heapq.heappush(waiting[d], (ready_at[m, d], negprio[m], m))

    def start(v, d, t):
        """Start v on d at t: hold its output, free its inputs' outputs, release its successors."""
        device[v], is_ready[v] = d, False
        finish[v] = free_at[d] = t + nodes.comp[v] * scale[nodes.rate_class[v], d]
        if fixed[group[v]] < 0:
            fix_group(group[v], d)
        used[d] += nodes.held[v]
        for p in range(g.pred_ptr[v], g.pred_ptr[v + 1]):
            u = g.pred_src[p]
            if g.data_edge[g.pred_eid[p]]:
                pending[u] -= 1
                if pending[u] == 0 and nodes.held[u] != 0:
                    used[device[u]] -= nodes.held[u]
                    unblock(device[u])
        for e in range(g.succ_ptr[v], g.succ_ptr[v + 1]):
            indegree[g.edge_dst[e]] -= 1
            if indegree[g.edge_dst[e]] == 0:
                release(g.edge_dst[e])

    for v in range(n):
        if indegree[v] == 0:
            release(v)
    for _ in range(n):
        found, key, t, prio, v, d = False, 0.0, 0.0, 0.0, 0, 0
        for e in range(k):
            ok, c_t, c_prio, c_v = best(e)
            c_key = c_t + nodes.comp[c_v] * scale[nodes.rate_class[c_v], e] if devices.by_finish else c_t
            if ok and (not found or (c_key, c_prio, c_v, e) < (key, prio, v, d)):
                found, key, t, prio, v, d = True, c_key, c_t, c_prio, c_v, e
        if not found:
            t, v, d = force()
        start(v, d, t)
    return device

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
them). A NORMAL node's output is held from the node's start until its last data
consumer has been scheduled; outputs no data edge consumes are not held. Copies
received from other devices are not counted: ETF decides in start-time order, not
on a timeline, so this is an estimate that the emulator then checks. A node that fits nowhere waits
until memory is freed; if every ready node waits, the one that overflows its
device least is started anyway, so the placer always returns a placement and the
emulator reports it infeasible.

Each device keeps its candidates in two heaps: nodes whose inputs arrive after the
device is free (keyed by arrival time) and nodes ready to start the moment it is
free (keyed by priority), so a step costs O(K log V) and the whole run
O(V K log V + E K).
"""

import heapq

import numpy as np

from pardnn.graph.node_memory import resident_bytes, transient_bytes
from pardnn.placers.baselines.common import GroupDevices, data_ready, link_tables
from pardnn.graph.levels import bottom_levels


def place(graph, cluster, timings=None) -> np.ndarray:
    return _ETF(graph, cluster).run()


class _ETF:
    def __init__(self, graph, cluster):
        n, k = graph.num_nodes, cluster.num_devices
        self.graph, self.n, self.k = graph, n, k
        self.csr = (graph.pred_ptr.tolist(), graph.pred_src.tolist(), graph.pred_eid.tolist(),
                    graph.edge_bytes.tolist())
        self.succ = (graph.succ_ptr.tolist(), graph.edge_dst.tolist())
        self.comp = graph.comp_us.tolist()
        self.groups = GroupDevices(graph, cluster)
        self.lat, self.inv_bw = link_tables(cluster)
        self.negprio = (-bottom_levels(graph, graph.comp_us)).tolist()
        data = graph.edge_slot >= 0
        consumers = np.bincount(graph.edge_src[data], minlength=n)
        self.held = np.where(consumers > 0, transient_bytes(graph), 0).tolist()
        self.pending = consumers.tolist()
        self.data_edge = data.tolist()
        self.indeg = np.diff(graph.pred_ptr).tolist()
        gpersist = np.bincount(graph.group, weights=resident_bytes(graph), minlength=graph.num_groups)
        self.gpersist = gpersist.tolist()
        self.need = (gpersist[graph.group] + np.asarray(self.held, float)).tolist()  # room to start
        self.cap = cluster.capacity.tolist()
        self.used, self.free_at = [0.0] * k, [0.0] * k
        self.finish, self.device = [0.0] * n, [-1] * n
        self.ready_at = {}                                  # ready node -> arrival time per device
        self.waiting = [[] for _ in range(k)]               # (arrival, -prio, node)
        self.arrived = [[] for _ in range(k)]               # (-prio, node, arrival)
        self.blocked = [[] for _ in range(k)]               # (bytes needed, -prio, node, arrival)

    def run(self) -> np.ndarray:
        for v in range(self.n):
            if self.indeg[v] == 0:
                self._release(v)
        best_of, devices = self._best, range(self.k)
        for _ in range(self.n):
            best = None
            for d in devices:
                cand = best_of(d)
                if cand is not None and (best is None or cand < best):
                    best = cand
            start, _, v, d = best if best is not None else self._force()
            self._start(v, d, start)
        return np.asarray(self.device, np.int32)

    # ----------------------------------------------------------- candidates
    def _release(self, v):
        ptr, src, eid, ebytes = self.csr
        ready = data_ready(v, ptr, src, eid, ebytes, self.finish, self.device,
                           self.lat, self.inv_bw, self.k)
        self.ready_at[v] = ready
        negprio, free_at, push = self.negprio[v], self.free_at, heapq.heappush
        for d in self.groups.choices(v):
            if ready[d] <= free_at[d]:               # arrived already: skip the waiting heap
                push(self.arrived[d], (negprio, v, ready[d]))
            else:
                push(self.waiting[d], (ready[d], negprio, v))

    def _status(self, v, d):
        """'ok', 'drop' (never on d) or 'block' (no memory on d for now)."""
        if self.device[v] >= 0:
            return "drop"
        fixed = self.groups.fixed[self.groups.group[v]]
        if fixed >= 0:
            return "ok" if fixed == d else "drop"
        return "ok" if self.used[d] + self.need[v] <= self.cap[d] else "block"

    def _best(self, d):
        """(start, -prio, node, d) of the node device d would start next, or None.

        Tops of d's heaps that can no longer start there (placed, or their group
        fixed elsewhere) are popped; those waiting for memory on d move to d's
        blocked heap."""
        waiting, arrived, free = self.waiting[d], self.arrived[d], self.free_at[d]
        pop, push = heapq.heappop, heapq.heappush
        while waiting and waiting[0][0] <= free:
            ready, negprio, v = pop(waiting)
            push(arrived, (negprio, v, ready))
        device, fixed, group, need = self.device, self.groups.fixed, self.groups.group, self.need
        used, cap = self.used[d], self.cap[d]
        for heap, at in ((arrived, 1), (waiting, 2)):
            while heap:
                top = heap[0]
                v = top[at]
                if device[v] < 0:
                    f = fixed[group[v]]
                    if f == d or (f < 0 and used + need[v] <= cap):
                        return (free, top[0], v, d) if at == 1 else (top[0], top[1], v, d)
                    if f < 0:                           # no room on d for now
                        push(self.blocked[d], (need[v], self.negprio[v], v, self.ready_at[v][d]))
                pop(heap)
        return None

    def _force(self):
        """Every ready node waits for memory: start the one that overflows least."""
        best = None
        for d in range(self.k):
            heap = self.blocked[d]
            while heap and self._status(heap[0][2], d) == "drop":
                heapq.heappop(heap)
            if heap:
                need, negprio, v, ready = heap[0]
                over = self.used[d] + need - self.cap[d]
                if best is None or (over, negprio, v) < best[0]:
                    best = ((over, negprio, v), (max(ready, self.free_at[d]), negprio, v, d))
        return best[1]

    # ------------------------------------------------------------ starting
    def _start(self, v, d, start):
        self.device[v] = d
        self.finish[v] = self.free_at[d] = start + self.comp[v]
        del self.ready_at[v]
        if self.groups.fix(v, d):
            self.used[d] += self.gpersist[self.groups.group[v]]
            self._wake_group(v, d)
        self.used[d] += self.held[v]
        ptr, src, eid, _ = self.csr
        for p in range(ptr[v], ptr[v + 1]):
            if not self.data_edge[eid[p]]:
                continue
            u = src[p]
            self.pending[u] -= 1
            if self.pending[u] == 0 and self.held[u]:
                self.used[self.device[u]] -= self.held[u]
                self._unblock(self.device[u])
        sptr, dst = self.succ
        for w in dst[sptr[v]:sptr[v + 1]]:
            self.indeg[w] -= 1
            if self.indeg[w] == 0:
                self._release(w)

    def _wake_group(self, v, d):
        """Ready members of v's group may have been blocked on d before the group
        was fixed there; they no longer need room, so queue them again."""
        for m in self.graph.group_members(self.groups.group[v]).tolist():
            if m in self.ready_at:
                heapq.heappush(self.waiting[d], (self.ready_at[m][d], self.negprio[m], m))

    def _unblock(self, d):
        heap = self.blocked[d]
        while heap and self.used[d] + heap[0][0] <= self.cap[d]:
            _, negprio, v, ready = heapq.heappop(heap)
            if self.device[v] < 0:
                heapq.heappush(self.waiting[d], (ready, negprio, v))

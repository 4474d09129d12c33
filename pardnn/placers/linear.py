"""Linear clustering + Guided Load Balancing: the baseline of thesis §6.4.2.

Linear clustering (Kim and Browne 1988; thesis §4.1.1 "Graph slicing" contrasts
ParDNN with it): find the critical path of the graph, counting compute on nodes
and mean-link communication on edges; make it a cluster and remove its nodes;
recompute the levels of what is left and repeat until every node is in a cluster.
ParDNN recomputes levels only K times; linear clustering recomputes them after
every path, O(V (V + E)) in the worst case, which is the cost the thesis measured
(hours on 190k nodes). Here the recomputation is incremental: removing a path can
only lower levels, so only the ancestors (bottom levels) and descendants (top
levels) of the removed nodes whose level actually drops are revisited, each once
per path, in topological order.

Guided Load Balancing (GLB, Radulescu and van Gemund 1998; thesis §4.1.1
"Mapping", Fig. 4.2e): clusters are taken in order of their start time in the
clustered schedule (top level with edges inside a cluster free) and each goes to
the device with the least compute assigned so far. GLB ignores communication and
balances globally, not over time; that is the weakness LALB fixes.

Colocation groups: every member of a group joins the cluster of the group's
first member (joining all the clusters a group touches instead would chain
variables, reads and optimizer updates into one giant unit). A cluster is also cut
where its path crosses between nodes pinned to different device kinds, so every
unit GLB maps has a single set of allowed devices.
"""

import heapq
import time

import numpy as np

from pardnn.graph.edge_costs import mean_edge_costs
from pardnn.graph.constraints import allowed_devices
from pardnn.graph.levels import bottom_levels, top_levels


def place(graph, cluster, timings=None) -> np.ndarray:
    timings = {} if timings is None else timings
    t0 = time.perf_counter()
    edge_us = mean_edge_costs(graph, cluster)
    label = linear_clusters(graph, graph.comp_us, edge_us)
    t1 = time.perf_counter()
    device = _glb(graph, cluster, label, edge_us)
    timings["clustering"] = t1 - t0
    timings["mapping"] = time.perf_counter() - t1
    return device


def linear_clusters(graph, node_cost, edge_cost) -> np.ndarray:
    """Cluster id per node; cluster c is the c-th critical path removed."""
    return _LinearClustering(graph, node_cost, edge_cost).run()


class _LinearClustering:
    def __init__(self, graph, node_cost, edge_cost):
        self.n = graph.num_nodes
        self.w = np.asarray(node_cost, float).tolist()
        self.c = np.asarray(edge_cost, float).tolist()
        self.tl = top_levels(graph, node_cost, edge_cost).tolist()
        self.bl = bottom_levels(graph, node_cost, edge_cost).tolist()
        self.succ = (graph.succ_ptr.tolist(), graph.edge_dst.tolist())
        self.pred = (graph.pred_ptr.tolist(), graph.pred_src.tolist(), graph.pred_eid.tolist())
        self.alive = [True] * self.n

    def run(self) -> np.ndarray:
        label = np.full(self.n, -1, np.int64)
        heap = [(-(t + b), v) for v, (t, b) in enumerate(zip(self.tl, self.bl))]
        heapq.heapify(heap)
        found = 0
        while heap:
            key, s = heapq.heappop(heap)
            if not self.alive[s] or -key != self.tl[s] + self.bl[s]:
                continue                                # removed, or a stale level
            path = self._critical_path(s)
            for v in path:
                self.alive[v] = False
            label[path] = found
            found += 1
            for v in self._update_bottom(path) | self._update_top(path):
                heapq.heappush(heap, (-(self.tl[v] + self.bl[v]), v))
        return label

    def _critical_path(self, s) -> list:
        """The heaviest path through s, which lies on a critical path of the
        remaining graph: walk to the predecessor that sets tl and the successor
        that sets bl (first in id order on ties)."""
        back, v = [], s
        while (v := self._best_pred(v)[1]) >= 0:
            back.append(v)
        path, v = back[::-1] + [s], s
        while (v := self._best_succ(v)[1]) >= 0:
            path.append(v)
        return path

    def _best_pred(self, x) -> tuple:
        """(tl of x over its alive predecessors, the one that sets it or -1)."""
        ptr, src, eid = self.pred
        best, arg = 0.0, -1
        for p in range(ptr[x], ptr[x + 1]):
            u = src[p]
            if self.alive[u] and (arg < 0 or self.tl[u] + self.w[u] + self.c[eid[p]] > best):
                best, arg = self.tl[u] + self.w[u] + self.c[eid[p]], u
        return best, arg

    def _best_succ(self, u) -> tuple:
        """(bl of u minus its own cost over its alive successors, the one that sets
        it or -1)."""
        sptr, dst = self.succ
        best, arg = 0.0, -1
        for e in range(sptr[u], sptr[u + 1]):
            x = dst[e]
            if self.alive[x] and (arg < 0 or self.c[e] + self.bl[x] > best):
                best, arg = self.c[e] + self.bl[x], x
        return best, arg

    def _alive_preds(self, v) -> list:
        ptr, src, _ = self.pred
        return [u for u in src[ptr[v]:ptr[v + 1]] if self.alive[u]]

    def _alive_succs(self, v) -> list:
        sptr, dst = self.succ
        return [x for x in dst[sptr[v]:sptr[v + 1]] if self.alive[x]]

    def _update_bottom(self, path) -> set:
        """Recompute bl of the alive ancestors of the removed path, latest first."""
        return self._propagate(path, self._alive_preds, -1, self.bl,
                               lambda u: self._best_succ(u)[0] + self.w[u])

    def _update_top(self, path) -> set:
        """Recompute tl of the alive descendants of the removed path, earliest first."""
        return self._propagate(path, self._alive_succs, 1, self.tl, lambda x: self._best_pred(x)[0])

    def _propagate(self, path, next_of, sign, level, recompute) -> set:
        """Visit the nodes next to the path in topological order (sign 1) or its
        reverse (sign -1), each once and after every node its level depends on;
        where a level drops, visit the nodes next to it too. Returns those changed."""
        work = [sign * u for v in path for u in next_of(v)]
        heapq.heapify(work)
        changed, last = set(), None
        while work:
            u = sign * heapq.heappop(work)
            if u == last:
                continue
            last = u
            value = recompute(u)
            if value != level[u]:
                level[u] = value
                changed.add(u)
                for x in next_of(u):
                    heapq.heappush(work, sign * x)
        return changed


def _glb(graph, cluster, label, edge_us) -> np.ndarray:
    """Map units (clusters with their colocation groups) to the least-loaded
    allowed device, in order of their start time."""
    n, k = graph.num_nodes, cluster.num_devices
    inter = label[graph.edge_src] != label[graph.edge_dst]
    start = top_levels(graph, graph.comp_us, np.where(inter, edge_us, 0.0))
    rows, row_of_group = np.unique(allowed_devices(graph, cluster), axis=0, return_inverse=True)
    row = row_of_group.reshape(-1)[graph.group]
    group_first = graph.group_nodes[graph.group_ptr[:-1]][graph.group]
    _, unit = np.unique((label * len(rows) + row)[group_first], return_inverse=True)
    unit = unit.reshape(-1)
    num_units = int(unit.max()) + 1 if n else 0
    unit_start = np.full(num_units, np.inf)
    np.minimum.at(unit_start, unit, start)
    unit_load = np.bincount(unit, weights=graph.comp_us, minlength=num_units).tolist()
    unit_row = np.zeros(num_units, np.int64)
    unit_row[unit] = row
    options = [np.flatnonzero(r).tolist() for r in rows]
    load = [0.0] * k
    unit_device = np.zeros(num_units, np.int32)
    for u in np.lexsort((np.arange(num_units), unit_start)).tolist():
        d = min(options[unit_row[u]], key=load.__getitem__)
        unit_device[u] = d
        load[d] += unit_load[u]
    return unit_device[unit]

"""Each cluster's cut edges, and the device choices that depend on where the other
ends are mapped (thesis Eq. 4.2's communication term; used by mapping and refine).

A cut edge's cost depends on the devices at both ends: `latency + bytes /
bandwidth` of that pair. For a cluster c, `counts(c)` sums its cut edges to mapped
nodes per device and direction, so the communication c would incur on each
candidate device is one (K x 4K) matrix-vector product. It is written as numpy's
elementwise product and row sum, not BLAS (`@`): BLAS picks its kernel by CPU model
and thread count, and the last bits it rounds differently changed which device won a
tie on another machine (docs/benchmarks.md, "Determinism").
"""

import numpy as np


class ClusterLinks:
    """Each cluster's cut edges, and the device choices that depend on where the
    other ends of those edges are mapped."""

    def __init__(self, graph, cluster, slices, cdev):
        cid, src, dst = slices.cluster, graph.edge_src, graph.edge_dst
        k = cluster.num_devices
        cut = np.flatnonzero(cid[src] != cid[dst])
        owner = np.concatenate([cid[src[cut]], cid[dst[cut]]])
        order = np.argsort(owner, kind="stable")
        self.ptr = np.searchsorted(owner[order], np.arange(slices.num_clusters + 1)).tolist()
        self.other = np.concatenate([dst[cut], src[cut]])[order].tolist()
        self.slot = np.repeat([0, 2 * k], len(cut))[order].tolist()     # out-edges, in-edges
        self.nbytes = np.concatenate([graph.edge_bytes[cut]] * 2)[order].tolist()
        order = np.argsort(cid, kind="stable")
        bounds = np.searchsorted(cid[order], np.arange(slices.num_clusters + 1)).tolist()
        order = order.tolist()
        self.members = [order[bounds[c]:bounds[c + 1]] for c in range(slices.num_clusters)]
        self.cdev = cdev
        self.dev = cdev[cid].tolist()
        lat = np.where(np.eye(k, dtype=bool), 0.0, cluster.latency_us)
        inv = np.where(np.eye(k, dtype=bool), 0.0, 1.0 / cluster.bandwidth)
        self.cost = np.hstack([lat, inv, lat.T, inv.T])          # Eq. 4.2 comm term per device
        mean_lat, mean_bw = cluster.mean_link()
        self.with_cost = np.array([mean_lat, 1.0 / mean_bw])
        self.k = k

    def counts(self, c):
        """(4, K): edges out, bytes out, edges in, bytes in, to nodes mapped on each
        device; None when no neighbour of c is mapped yet."""
        k, dev, other, slot, nbytes = self.k, self.dev, self.other, self.slot, self.nbytes
        out = None
        for i in range(self.ptr[c], self.ptr[c + 1]):
            d = dev[other[i]]
            if d >= 0:
                if out is None:
                    out = [0.0] * (4 * k)
                j = slot[i] + d
                out[j] += 1
                out[j + k] += nbytes[i]
        return None if out is None else np.asarray(out).reshape(4, k)

    def comm_cost(self, c) -> np.ndarray:
        """Per device: what c's cut edges to mapped nodes would cost with c there."""
        counts = self.counts(c)
        return np.zeros(self.k) if counts is None else _matvec(self.cost, counts.reshape(-1))

    def merge(self, c, ok) -> bool:
        """Initial merging: map c to the allowed device it communicates with most."""
        counts = self.counts(c)
        if counts is None:
            return False
        comm_with = self._comm_with(counts)
        comm_with[~ok] = -1.0
        d = int(np.argmax(comm_with))
        if comm_with[d] <= 0.0:
            return False
        self.assign(c, d)
        return True

    def lalb(self, c, loads, ok) -> int:
        """Eq. 4.2: map c where work in its span plus its communication is least."""
        counts = self.counts(c)
        cost = loads if counts is None else loads + _matvec(self.cost, counts.reshape(-1))
        cost[~ok] = np.inf
        best = np.flatnonzero(cost == cost.min())
        if len(best) > 1 and counts is not None:
            d = int(best[np.argmax(self._comm_with(counts)[best])])
        else:
            d = int(best[0])
        self.assign(c, d)
        return d

    def assign(self, c, d):
        self.cdev[c] = d
        for n in self.members[c]:
            self.dev[n] = d

    def _comm_with(self, counts) -> np.ndarray:
        """Per device: mean-link cost of c's edges to nodes mapped there."""
        both = counts[:2] + counts[2:]
        return self.with_cost[0] * both[0] + self.with_cost[1] * both[1]


def _matvec(matrix, vector) -> np.ndarray:
    """matrix @ vector, summed in an order that is the same on every machine."""
    return (matrix * vector).sum(axis=1)

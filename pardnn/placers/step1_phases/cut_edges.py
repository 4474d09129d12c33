"""Each cluster's cut edges and members, and what its communication costs on each
device given where the other ends are mapped (thesis Eq. 4.2's communication term;
used by mapping and refine).

A cut edge's cost depends on the devices at both ends: `latency + bytes /
bandwidth` of that pair. For a cluster c, `counts(c)` sums its cut edges to mapped
nodes per device and direction, so the communication c would incur on each
candidate device is one (K x 4K) matrix-vector product. It is written as numpy's
elementwise product and row sum, not BLAS (`@`): BLAS picks its kernel by CPU model
and thread count, and the last bits it rounds differently changed which device won a
tie on another machine (docs/benchmarks.md, "Determinism"). numpy sums a row
pairwise (blocks of up to 128 terms in eight accumulators, halves added);
`numpy_sum_plan` spells that order out for the kernels of mapping and cluster
swapping, which sum the same way.
"""

import functools
from typing import NamedTuple

import numpy as np

BLOCK = 128         # numpy's pairwise summation sums runs of up to 128 terms in 8 accumulators
ADD, ZERO = -1, -2  # the operations of a numpy_sum_plan besides pushing a term


class Links(NamedTuple):
    """ClusterLinks as arrays (int64, float64), what the mapping's kernel reads."""

    ptr: np.ndarray             # cluster c's cut edges are [ptr[c], ptr[c + 1]) below
    other: np.ndarray           # the node at the edge's other end
    slot: np.ndarray            # 0 for an edge out of c, 2K for an edge into c
    nbytes: np.ndarray          # float64
    member_ptr: np.ndarray      # cluster c's nodes are member_nodes[member_ptr[c]:...]
    member_nodes: np.ndarray    # ascending within a cluster
    cost: np.ndarray            # (K, 4K): Eq. 4.2's cost per count of `counts`
    with_cost: np.ndarray       # the mean link's latency and 1 / bandwidth
    plan: np.ndarray            # numpy_sum_plan(4K): numpy's order of a 4K-term row sum


class ClusterLinks:
    """Each cluster's cut edges and members (`arrays`), the device of every cluster
    (`cdev`) and node (`dev`, -1 while unmapped), and communication costs. Placement
    reads `arrays` in the kernels of mapping and swapping; `counts`, `comm_cost` and
    `members` are the numpy definition those kernels are tested against."""

    def __init__(self, graph, cluster, slices, cdev):
        cid, src, dst = slices.cluster, graph.edge_src, graph.edge_dst
        k, clusters = cluster.num_devices, np.arange(slices.num_clusters + 1)
        cut = np.flatnonzero(cid[src] != cid[dst])
        owner = np.concatenate([cid[src[cut]], cid[dst[cut]]])
        order = np.argsort(owner, kind="stable")
        members = np.argsort(cid, kind="stable")
        lat = np.where(np.eye(k, dtype=bool), 0.0, cluster.latency_us)
        inv = np.where(np.eye(k, dtype=bool), 0.0, 1.0 / cluster.bandwidth)
        mean_lat, mean_bw = cluster.mean_link()
        self.arrays = Links(
            np.searchsorted(owner[order], clusters).astype(np.int64),
            np.concatenate([dst[cut], src[cut]])[order].astype(np.int64),
            np.repeat(np.array([0, 2 * k], np.int64), len(cut))[order],    # out-edges, in-edges
            np.concatenate([graph.edge_bytes[cut]] * 2)[order].astype(np.float64),
            np.searchsorted(cid[members], clusters).astype(np.int64), members.astype(np.int64),
            np.hstack([lat, inv, lat.T, inv.T]).astype(np.float64),       # Eq. 4.2 comm term per device
            np.array([mean_lat, 1.0 / mean_bw], np.float64),
            numpy_sum_plan(4 * k))
        self.cdev = cdev
        self.dev = cdev[cid].astype(np.int64)
        self.k = k

    @functools.cached_property
    def members(self) -> list:
        """Per cluster: the list of its nodes, ascending."""
        nodes, ptr = self.arrays.member_nodes.tolist(), self.arrays.member_ptr.tolist()
        return [nodes[a:b] for a, b in zip(ptr[:-1], ptr[1:])]

    def counts(self, c):
        """(4, K): edges out, bytes out, edges in, bytes in, to nodes mapped on each
        device; None when no neighbour of c is mapped yet."""
        a, k = self.arrays, self.k
        edges = slice(a.ptr[c], a.ptr[c + 1])
        dev = self.dev[a.other[edges]]
        mapped = dev >= 0
        if not mapped.any():
            return None
        j = a.slot[edges][mapped] + dev[mapped]       # bincount adds in edge order, as the kernel
        out = np.bincount(j, minlength=4 * k) + np.bincount(j + k, a.nbytes[edges][mapped], 4 * k)
        return out.reshape(4, k)

    def comm_cost(self, c) -> np.ndarray:
        """Per device: what c's cut edges to mapped nodes would cost with c there."""
        counts = self.counts(c)
        return np.zeros(self.k) if counts is None else _matvec(self.arrays.cost, counts.reshape(-1))

    def assign(self, c, d):
        self.cdev[c] = d
        self.dev[self.arrays.member_nodes[self.arrays.member_ptr[c]:self.arrays.member_ptr[c + 1]]] = d


def _matvec(matrix, vector) -> np.ndarray:
    """matrix @ vector, summed in an order that is the same on every machine."""
    return (matrix * vector).sum(axis=1)


def numpy_sum_plan(n: int) -> np.ndarray:
    """The order in which numpy sums n float64 along a contiguous axis (np.add.reduce,
    numpy's pairwise_sum) as a postfix program: an entry i >= 0 pushes term i, ADD
    adds the top two, ZERO pushes 0.0. numpy adds the pairwise sum to 0.0; it halves
    runs of more than BLOCK terms (the first half a multiple of 8); a shorter run of 8
    or more goes to 8 accumulators (accumulator j takes terms j, j + 8, ...), added
    as ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7)), then the terms left over
    one by one; a run of fewer than 8 is summed from 0.0."""
    plan = [ZERO]

    def add_each(first, stop, step=1):
        for i in range(first, stop, step):
            plan.extend((i, ADD))

    def run(lo, length):
        if length > BLOCK:
            half = length // 2 - (length // 2) % 8
            run(lo, half)
            run(lo + half, length - half)
            plan.append(ADD)
        elif length < 8:
            plan.append(ZERO)
            add_each(lo, lo + length)
        else:
            end = lo + length - length % 8
            for j in range(8):
                plan.append(lo + j)
                add_each(lo + j + 8, end, 8)
                plan.extend([ADD] * (0, 1, 0, 2, 0, 1, 0, 3)[j])    # the pairs closed after r_j
            add_each(end, lo + length)

    run(0, n)
    plan.append(ADD)
    return np.array(plan, np.int64)

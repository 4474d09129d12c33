"""Balanced min-cut partition with METIS (Karypis and Kumar, via pymetis).

The graph-partitioning baseline of thesis §2.2.3: direction is dropped, each
colocation group becomes one vertex weighted by its compute time, and parallel
edges between two groups become one edge weighted by the bytes they carry. METIS
splits the vertices into K parts of (nearly) equal weight cutting as few bytes as
possible. The thesis cites 2-10x slowdowns for this class of placer on dataflow
graphs, because balanced total work says nothing about work available at the same
time; `pardnn compare` shows whether that holds.

METIS takes 32-bit integer weights, so compute times and bytes are rescaled to
integers (at least 1: METIS rejects zero edge weights and a zero vertex weight
would let it pile free nodes anywhere). The seed is fixed, so the partition is
deterministic. Groups pinned to a device kind that METIS put elsewhere are moved
to the least-loaded device of their kind; the part numbers are used as device
indices, which ignores link topology (METIS partitions, it does not map).
"""

import contextlib
import os
import sys

import numpy as np

from pardnn.graph.constraints import allowed_devices

_MAX_TOTAL = 2**28          # keep every weight sum well inside METIS' int32


def place(graph, cluster, timings=None) -> np.ndarray:
    allowed = allowed_devices(graph, cluster)
    k, num_groups = cluster.num_devices, graph.num_groups
    work = np.bincount(graph.group, weights=graph.comp_us, minlength=num_groups)
    if k == 1 or num_groups <= 1:
        part = np.zeros(num_groups, np.int64)
    else:
        part = _partition(graph, work, k)
    part = _respect_pins(part, allowed, work)
    return part.astype(np.int32)[graph.group]


def _partition(graph, work, k) -> np.ndarray:
    import pymetis
    num_groups = len(work)
    a, b = graph.group[graph.edge_src].astype(np.int64), graph.group[graph.edge_dst].astype(np.int64)
    keep = a != b
    a, b, nbytes = a[keep], b[keep], graph.edge_bytes[keep].astype(float)
    lo, hi = np.minimum(a, b), np.maximum(a, b)
    pairs, inverse = np.unique(lo * num_groups + hi, return_inverse=True)
    weight = np.bincount(inverse.reshape(-1), weights=nbytes, minlength=len(pairs))
    lo, hi = pairs // num_groups, pairs % num_groups
    src, dst = np.concatenate([lo, hi]), np.concatenate([hi, lo])
    order = np.lexsort((dst, src))
    src, dst = src[order], dst[order]
    xadj = np.zeros(num_groups + 1, np.int64)
    np.cumsum(np.bincount(src, minlength=num_groups), out=xadj[1:])
    eweights = _integer_weights(np.concatenate([weight, weight])[order])
    vweights = _integer_weights(work)
    options = pymetis.Options(seed=0)
    with _quiet_c_output():
        _, membership = pymetis.part_graph(k, xadj=xadj.tolist(), adjncy=dst.tolist(),
                                           vweights=vweights.tolist(), eweights=eweights.tolist(),
                                           options=options)
    return np.asarray(membership, np.int64)


@contextlib.contextmanager
def _quiet_c_output():
    """Silence METIS' C-level messages ("Cannot bisect a graph with 0 vertices!",
    printed when one group holds most of the work and a part stays empty): they go
    to file descriptor 1, which would corrupt `pardnn compare --json` output."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        yield
    finally:
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in saved + [devnull]:
            os.close(fd)


def _integer_weights(values) -> np.ndarray:
    """Positive integers proportional to values, summing to at most ~_MAX_TOTAL."""
    values = np.asarray(values, float)
    total = values.sum()
    scale = _MAX_TOTAL / total if total > 0 else 1.0
    return np.maximum(1, np.floor(values * scale)).astype(np.int64)


def _respect_pins(part, allowed, work) -> np.ndarray:
    """Move groups METIS put on a device of the wrong kind to the least-loaded
    device of their kind."""
    part = part.copy()
    bad = np.flatnonzero(~allowed[np.arange(len(part)), part])
    if len(bad) == 0:
        return part
    load = np.bincount(np.delete(part, bad), weights=np.delete(work, bad), minlength=allowed.shape[1])
    for g in bad.tolist():
        options = np.flatnonzero(allowed[g])
        d = int(options[np.argmin(load[options])])
        part[g] = d
        load[d] += work[g]
    return part

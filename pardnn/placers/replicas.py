"""Data parallelism across hosts (`pardnn place --replicas R`), on the cost graph:
which tensors are averaged across replicas, and what a replicated step costs.

The thesis (§5.1, "Extending ParDNN to multiple nodes") proposes ParDNN inside a
host and data parallelism across hosts. Here the graph is placed on the first host's
devices; replica r runs a copy of it on host r with the same local devices, taking
its own slice of the batch through its own feeds. The profile describes one
replica's step, so the profiled batch is the per-replica batch and the global batch
is R times it.

What is averaged: every input of a variable update (an optimizer's Apply op, an
Assign*, a Scatter*) that depends on the replica's data — reachable from a
Placeholder (or an input pipeline's IteratorGetNext) along data edges. For an
optimizer that is the gradient; for a moving average (batch norm) it is the update
delta. Each such tensor is summed over the
replicas and divided by R once, on the update's device of one replica (tensor k
on replica k mod R, to spread the work), and every replica's update reads that
one mean. Reduce at one replica, then broadcast: 2 (R - 1) transfers per tensor,
the same traffic as a ring all-reduce, and every replica applies bit-identical
values, so the replicas' variables stay identical. Inputs that do not depend on
the data (learning rate, Adam's beta powers) are left alone: they are already
equal in every replica.

The step-time estimate emulates the whole replicated graph on the cluster (R copies
plus one mean node per averaged tensor, costed 0 us of compute: the additions are
negligible next to the transfers), so the all-reduce overlaps with the backward
pass exactly as far as the link model lets it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from pardnn.emulator.scheduler import simulate
from pardnn.errors import UserError
from pardnn.graph import CostGraph
from pardnn.placers.hierarchical import host_cluster
from pardnn.units import format_size, format_time

WRITER_OPS = re.compile(r"^(Resource)?(Sparse)?Apply[A-Z]|Assign"
                        r"|^(Resource)?Scatter(Add|Sub|Mul|Div|Min|Max|Update|Nd(Add|Sub|Update))$")
DATA_OPS = re.compile(r"^(Placeholder|IteratorGetNext)")
MEAN_PREFIX = "allreduce"


@dataclass(frozen=True)
class Averaging:
    """Tensors averaged across replicas, and the update edges that read them."""

    src: np.ndarray          # int64 per tensor: producer node
    slot: np.ndarray         # int64 per tensor: output slot
    nbytes: np.ndarray       # int64 per tensor
    edges: np.ndarray        # int64: edge ids (producer -> update) that read a mean instead
    edge_tensor: np.ndarray  # int64 per edge in `edges`: its tensor

    @property
    def num_tensors(self) -> int:
        return len(self.src)


def mean_name(graph, averaging, k: int) -> str:
    """Node name of the mean of averaged tensor k (shared by the TF rewrite)."""
    return f"{MEAN_PREFIX}/{graph.names[averaging.src[k]]}/{averaging.slot[k]}"


def data_dependent(graph) -> np.ndarray:
    """Bool per node: reachable from a data source (DATA_OPS) along data edges.

    Edge ids are sorted by source and sources precede destinations, so one pass in
    edge-id order sees every edge into a node before any edge out of it."""
    dep = np.array([bool(DATA_OPS.match(op)) for op in graph.ops], bool)
    data = np.flatnonzero(graph.edge_slot >= 0)
    for s, d in zip(graph.edge_src[data].tolist(), graph.edge_dst[data].tolist()):
        if dep[s]:
            dep[d] = True
    return dep


def averaged_tensors(graph) -> Averaging:
    """The data-dependent inputs of variable updates (module docstring)."""
    writer = np.array([bool(WRITER_OPS.search(op)) for op in graph.ops], bool)
    dep = data_dependent(graph)
    edges = np.flatnonzero(writer[graph.edge_dst] & dep[graph.edge_src] & (graph.edge_slot >= 0))
    keys = np.stack([graph.edge_src[edges], graph.edge_slot[edges]]).astype(np.int64)
    uniq, first, inverse = np.unique(keys, axis=1, return_index=True, return_inverse=True)
    return Averaging(uniq[0], uniq[1], graph.edge_bytes[edges[first]].astype(np.int64),
                     edges, inverse.reshape(-1).astype(np.int64))


def check_averaged(graph, source: str) -> None:
    """UserError when no tensor would be averaged: a graph without TF op names (a
    cost graph JSON from another tool) or without training updates fed by the data.
    Its replicas would train apart, and the step estimate would be one replica's."""
    if averaged_tensors(graph).num_tensors == 0:
        raise UserError(f"--replicas: {source} has no variable update that reads the data (an op such as "
                        f"ApplyAdam or AssignSubVariableOp fed from a Placeholder or IteratorGetNext), so "
                        f"nothing would be averaged across replicas; --replicas needs TF op names")


def replica_cluster(cluster, replicas: int):
    """The first host's cluster, which one replica is placed on; UserError when the
    cluster cannot take `replicas` replicas (see replica_devices)."""
    if replicas < 1:
        raise UserError(f"--replicas: need at least 1 replica, got {replicas}")
    replica_devices(cluster, replicas)
    return host_cluster(cluster, 0)


def replica_devices(cluster, replicas: int) -> np.ndarray:
    """(R, D) device index of local device j of host 0 on host r; UserError when the
    cluster has fewer hosts than replicas or a host lacks one of host 0's devices."""
    hosts = len(cluster.hosts)
    if replicas > hosts:
        raise UserError(f"--replicas: {replicas} replicas need {replicas} hosts; "
                        f"--devices has {hosts} ({', '.join(h.task for h in cluster.hosts)})")
    local = {}
    for i, d in enumerate(cluster.devices):
        local[d.host, d.name.rsplit("/device:", 1)[1].upper()] = i
    first = [d.name.rsplit("/device:", 1)[1].upper() for d in cluster.devices if d.host == 0]
    table = np.empty((replicas, len(first)), np.int64)
    for r in range(replicas):
        for j, short in enumerate(first):
            if (r, short) not in local:
                raise UserError(f"--replicas: host {cluster.hosts[r].task} has no {short}, "
                                f"which host {cluster.hosts[0].task} has; replicas need alike hosts")
            table[r, j] = local[r, short]
    return table


def replicated_graph(graph, averaging, device, table):
    """(CostGraph of R replicas plus the mean nodes, device index per node of it).

    `device` is the per-replica placement (host 0's local device indices)."""
    n, replicas = graph.num_nodes, table.shape[0]
    t = averaging.num_tensors
    names = [f"replica_{r}/{name}" for r in range(replicas) for name in graph.names]
    names += [mean_name(graph, averaging, k) for k in range(t)]
    keep = np.ones(graph.num_edges, bool)
    keep[averaging.edges] = False
    shift = np.arange(replicas)[:, None] * n
    mean_id = replicas * n + np.arange(t)
    src = [(graph.edge_src[keep] + shift).ravel(), (averaging.src + shift).ravel(),
           np.tile(mean_id[averaging.edge_tensor], replicas)]
    dst = [(graph.edge_dst[keep] + shift).ravel(), np.tile(mean_id, replicas),
           (graph.edge_dst[averaging.edges] + shift).ravel()]
    ebytes = [np.tile(graph.edge_bytes[keep], replicas), np.tile(averaging.nbytes, replicas),
              np.tile(averaging.nbytes[averaging.edge_tensor], replicas)]
    slots = [np.tile(graph.edge_slot[keep], replicas), np.tile(averaging.slot, replicas),
             np.zeros(replicas * len(averaging.edges), np.int64)]
    _, first = np.unique(averaging.edge_tensor, return_index=True)
    first_writer = graph.edge_dst[averaging.edges[first]]
    owner = np.arange(t) % replicas
    node_device = np.concatenate([table[r][device] for r in range(replicas)]
                                 + [table[owner, device[first_writer]]])
    rep = CostGraph.build(
        names=names, ops=list(graph.ops) * replicas + ["AddN"] * t,
        comp_us=np.concatenate([np.tile(graph.comp_us, replicas), np.zeros(t)]),
        out_bytes=np.concatenate([np.tile(graph.out_bytes, replicas), averaging.nbytes]),
        persist_bytes=np.concatenate([np.tile(graph.persist_bytes, replicas), np.zeros(t, np.int64)]),
        temp_bytes=np.concatenate([np.tile(graph.temp_bytes, replicas), np.zeros(t, np.int64)]),
        kind=np.concatenate([np.tile(graph.kind, replicas), np.zeros(t, np.int8)]),
        group=np.concatenate([(graph.group + np.arange(replicas)[:, None] * graph.num_groups).ravel(),
                              replicas * graph.num_groups + np.arange(t)]).tolist(),
        pinned=list(graph.pinned) * replicas + [""] * t,
        edge_src=np.concatenate(src), edge_dst=np.concatenate(dst),
        edge_bytes=np.concatenate(ebytes), edge_slot=np.concatenate(slots))
    position = {name: i for i, name in enumerate(names)}
    return rep, node_device[[position[name] for name in rep.names]].astype(np.int32)


def estimate(graph, device, cluster, replicas: int, per_replica_us: float) -> dict:
    """report.json's `replicas` block: the emulated step time of R replicas with the
    all-reduce, on `cluster` (all hosts), for per-replica placement `device`."""
    table = replica_devices(cluster, replicas)
    averaging = averaged_tensors(graph)
    rep, rep_device = replicated_graph(graph, averaging, np.asarray(device), table)
    step = simulate(rep, cluster, rep_device).makespan
    return {
        "count": replicas,
        "hosts": [cluster.hosts[r].task for r in range(replicas)],
        "averaged_tensors": averaging.num_tensors,
        "allreduce_bytes": int(averaging.nbytes.sum()),
        "per_replica_makespan_us": per_replica_us,
        "step_time_us": step,
    }


def summary_line(block) -> str:
    """One line for the `replicas` block of report.json."""
    return (f"  {block['count']} replicas on {', '.join(block['hosts'])}: step time "
            f"{format_time(block['step_time_us'])} with {block['averaged_tensors']} tensors "
            f"({format_size(block['allreduce_bytes'])}) averaged across replicas; one replica alone "
            f"{format_time(block['per_replica_makespan_us'])}")

"""What a step of data parallelism costs (`pardnn place --replicas R`): the graph is
placed on one replica's devices (the first host's; on one host, its first K/R
devices: pardnn.hardware.hosts); replica r runs a copy of it on its own devices (host
r's, or the r-th group of K/R), taking its own slice of the batch through its own
feeds. The profile describes one replica's step, so the profiled batch is the
per-replica batch and the global batch is R times it (thesis §5.1: ParDNN inside a
host, data parallelism across hosts; inside one host, replicas of a placement over
fewer devices, as RaNNC replicates its stages).

Each averaged tensor (pardnn.graph.averaging) is summed over the replicas and divided
by R once, on the update's device of one replica (tensor k on replica k mod R, to
spread the work), and every replica's update reads that one mean. Reduce at one
replica, then broadcast: 2 (R - 1) transfers per tensor, the same traffic as a ring
all-reduce, and every replica applies bit-identical values, so the replicas'
variables stay identical.

The step-time estimate emulates the whole replicated graph on the cluster (R copies
plus one mean node per averaged tensor, costed 0 us of compute: the additions are
negligible next to the transfers), so the all-reduce overlaps with the backward
pass exactly as far as the link model lets it.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from pardnn.emulator.scheduler import simulate
from pardnn.graph import CostGraph
from pardnn.graph.averaging import averaged_tensors, mean_name
from pardnn.graph.order import with_order
from pardnn.pipeline.schedule import TIE
from pardnn.hardware.hosts import replica_devices
from pardnn.base.units import format_size, format_time


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


def estimate(graph, device, cluster, replicas: int, per_replica_us: float, order=None) -> dict:
    """report.json's `replicas` block: the emulated step time of R replicas with the
    all-reduce, on `cluster` (all hosts), for per-replica placement `device`; each
    replica carries `order` (a pardnn.graph.order.Order of `graph`), when given."""
    table = replica_devices(cluster, replicas)
    if order is not None and len(order):
        graph, renumber = with_order(graph, order)
        moved = np.empty(graph.num_nodes, np.int64)
        moved[renumber] = np.asarray(device)
        device = moved
    averaging = averaged_tensors(graph)
    rep, rep_device = replicated_graph(graph, averaging, np.asarray(device), table)
    step = simulate(rep, cluster, rep_device).makespan
    return {
        "count": replicas,
        "hosts": [cluster.hosts[cluster.devices[table[r, 0]].host].task for r in range(replicas)],
        "devices_per_replica": int(table.shape[1]),
        "averaged_tensors": averaging.num_tensors,
        "allreduce_bytes": int(averaging.nbytes.sum()),
        "per_replica_makespan_us": per_replica_us,
        "step_time_us": step,
    }


def fastest_replicated(graph, placement, scheduled, cluster, replicas: int):
    """`placement` carrying, of the orders `scheduled` emulated on it (those whose peak
    fits: pardnn.pipeline.schedule.schedules), the one whose step of R replicas
    (`estimate`, the all-reduce included) is the shortest; FIFO, listed first, on a
    tie. An order chosen for one replica alone can delay the gradients the all-reduce
    waits for: on the transformer split in 2, 2 replicas of 4 H100s, 1F1B's order runs
    one replica in 130.0 ms against FIFO's 153.2 but the replicated step in 160.7 ms
    against 154.6."""
    best = None
    for s in scheduled:
        if not s.fits:
            continue
        step = estimate(graph, placement.device, cluster, replicas, s.makespan_us, s.order)["step_time_us"]
        if best is None or step < best[0] * (1 - TIE):
            best = (step, s)
    if best is None:
        return placement
    s = best[1]
    return replace(placement, schedule=s.schedule, profile=s.profile, order=None if s.name == "fifo" else s.order,
                   schedule_name=s.name)


def summary_line(block) -> str:
    """One line for the `replicas` block of report.json."""
    hosts = list(dict.fromkeys(block["hosts"]))
    where = ("on " + ", ".join(hosts) if len(hosts) == len(block["hosts"]) else
             f"of {block['devices_per_replica']} device{'s' * (block['devices_per_replica'] != 1)} each on "
             f"{', '.join(hosts)}")
    return (f"  {block['count']} replicas {where}: step time "
            f"{format_time(block['step_time_us'])} with {block['averaged_tensors']} tensors "
            f"({format_size(block['allreduce_bytes'])}) averaged across replicas; one replica alone "
            f"{format_time(block['per_replica_makespan_us'])}"
            + (f"; {format_time(block['time_per_sample_us'])} per sample ({block['samples_per_step']} per step)"
               if "time_per_sample_us" in block else ""))

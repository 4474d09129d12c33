"""Hierarchical placement over several hosts: split the graph across hosts first, then
place each host's share on that host's devices (`--algorithm pardnn-hier`).

The ParDNN thesis (§5.1, "Extending ParDNN to multiple nodes") keeps ParDNN inside
one node; Piper (Appendix E) and the Yale hierarchical planners partition over the
slow links first and the fast links second. Here both levels run the same placer
(ParDNN Step 1), and the emulator, which the pipeline lends as `emulate`, picks
between two plans:

1. Host level: each host becomes one device whose links to another host are the
   mean latency and the harmonic-mean bandwidth of the device pairs between them,
   and whose memory is the sum of its devices'. The host's compute times are those
   of the graph divided by its device count: a host with D devices gets through D
   times the work of one device, so a cut across hosts is weighed against that
   throughput rather than against one device's. (The thesis gives no host-level
   cost model; this is our choice, and it is what lets the split keep communication
   off the slow links when they cost more than the parallelism saves.)
2. Device level: the nodes given to a host form an induced subgraph (edges to other
   hosts dropped; their transfers were priced at the host level), placed on that
   host's devices and intra-host links.
3. Keep the split only if the emulator finds it faster than Step 1 on the
   first host alone. When the links between hosts are slow next to the work a second
   host would take over, one host is the better plan (the thesis's argument for
   ParDNN inside a node), and the split, which always uses every host, cannot say so.

Colocation groups never straddle hosts (the host-level placer keeps groups whole).
Every host must offer the same device kinds, so that a node pinned to a kind can go
to any host. With one host this is Step 1 itself.
"""

from __future__ import annotations

import time
from dataclasses import replace
from functools import partial

import numpy as np

from pardnn.base.errors import UserError
from pardnn.graph import CostGraph
from pardnn.hardware import Cluster, Device
from pardnn.hardware.hosts import host_cluster
from pardnn.placers import step1

HOST_KIND = "HOST"   # the host-level devices' kind: matches no pin, so pins don't restrict hosts


def place(graph, cluster, timings=None, *, emulate) -> np.ndarray:
    """Device index (int32) per node: the faster, by `emulate`, of the split across
    hosts and Step 1 on the first host alone."""
    timings = {} if timings is None else timings
    placer = partial(step1.place, emulate=emulate)
    if len(cluster.hosts) < 2:
        return placer(graph, cluster, timings)
    _check_alike_kinds(cluster)
    split = split_then_place(graph, cluster, placer, timings)
    t1 = time.perf_counter()
    first = np.flatnonzero(cluster.host_of == 0)
    alone = first[placer(graph, host_cluster(cluster, 0), {})].astype(np.int32)
    t2 = time.perf_counter()
    best = min((split, alone), key=lambda d: emulate(graph, cluster, d).makespan)
    timings.update(one_host=t2 - t1, choose=time.perf_counter() - t2)
    return best


def split_then_place(graph, cluster, placer, timings) -> np.ndarray:
    """Steps 1 and 2 of the module docstring; stage seconds go into `timings`."""
    t0 = time.perf_counter()
    per_host = np.bincount(cluster.host_of, minlength=len(cluster.hosts))
    scaled = replace(graph, comp_us=graph.comp_us / per_host.mean())
    host = np.asarray(placer(scaled, host_level_cluster(cluster), {}))
    t1 = time.perf_counter()
    device = np.empty(graph.num_nodes, np.int32)
    for h in range(len(cluster.hosts)):
        nodes = np.flatnonzero(host == h)
        devices = np.flatnonzero(cluster.host_of == h)
        if len(nodes) == 0:
            continue
        local = np.zeros(len(nodes), np.int64)
        if len(devices) > 1:
            local = placer(subgraph(graph, nodes), host_cluster(cluster, h), {})
        device[nodes] = devices[local]
    timings.update(split_hosts=t1 - t0, within_hosts=time.perf_counter() - t1)
    return device


def host_level_cluster(cluster) -> Cluster:
    """One device per host: summed memory, mean latency and harmonic-mean bandwidth
    over the device pairs between two hosts."""
    n = len(cluster.hosts)
    host_of = cluster.host_of
    lat = np.zeros((n, n))
    bw = np.full((n, n), np.inf)
    for a in range(n):
        for b in range(n):
            if a != b:
                pair = np.ix_(host_of == a, host_of == b)
                lat[a, b] = cluster.latency_us[pair].mean()
                bw[a, b] = 1.0 / (1.0 / cluster.bandwidth[pair]).mean()
    memory = np.bincount(host_of, weights=cluster.memory, minlength=n)
    devices = tuple(Device(f"{host.task}/device:{HOST_KIND}:0", HOST_KIND, int(memory[h]), h)
                    for h, host in enumerate(cluster.hosts))
    return Cluster(devices, lat, bw, cluster.reserve, cluster.preset, cluster.hosts)


def subgraph(graph, nodes) -> CostGraph:
    """The subgraph induced by `nodes` (ascending ids), with their groups and pins."""
    nodes = np.asarray(nodes, np.int64)
    new_id = np.full(graph.num_nodes, -1, np.int64)
    new_id[nodes] = np.arange(len(nodes))
    keep = (new_id[graph.edge_src] >= 0) & (new_id[graph.edge_dst] >= 0)
    return CostGraph.build(
        names=[graph.names[i] for i in nodes.tolist()], ops=[graph.ops[i] for i in nodes.tolist()],
        comp_us=graph.comp_us[nodes], out_bytes=graph.out_bytes[nodes],
        persist_bytes=graph.persist_bytes[nodes], temp_bytes=graph.temp_bytes[nodes], kind=graph.kind[nodes],
        group=graph.group[nodes].tolist(), pinned=[graph.pinned[i] for i in nodes.tolist()],
        edge_src=new_id[graph.edge_src[keep]], edge_dst=new_id[graph.edge_dst[keep]],
        edge_bytes=graph.edge_bytes[keep], edge_slot=graph.edge_slot[keep])


def _check_alike_kinds(cluster):
    kinds = [sorted({d.kind.upper() for d in cluster.devices if d.host == h})
             for h in range(len(cluster.hosts))]
    for h, k in enumerate(kinds):
        if k != kinds[0]:
            raise UserError(f"--algorithm pardnn-hier: host {cluster.hosts[h].task} has devices "
                            f"{'/'.join(k)}, host {cluster.hosts[0].task} has {'/'.join(kinds[0])}; "
                            f"hierarchical placement needs hosts with the same device kinds")

"""The emulated step as trace events (pardnn.io.trace_events gives the layout):
every op on its device's track, every transfer on its link's, each device's memory
as a counter, and the critical path marked (pardnn.emulator.critical_path)."""

from __future__ import annotations

import numpy as np

from pardnn.emulator.critical_path import critical_path
from pardnn.io.trace_events import (flow_events, memory_events, op_events, short_names, tracks,
                                    transfer_events)


SLICE = 50_000      # ops or transfers turned into events at once


def emulated_step(graph, cluster, device, schedule, profile):
    """Trace events (JSON strings, in the file's order) of an emulated step
    (`schedule`, memory `profile`) of placement `device` on `cluster`, with its critical
    path marked. A generator that makes the ops' and transfers' events a slice at a
    time, so a million-node step's events never all exist at once."""
    k = cluster.num_devices
    device = np.asarray(device, np.int64)
    path, path_transfers = critical_path(graph, device, schedule)
    on_path = np.zeros(graph.num_nodes, bool)
    on_path[path] = True
    links, transfers = _transfers(graph, cluster, device, schedule, path_transfers)
    yield from tracks(cluster.names, links)
    for lo in range(0, graph.num_nodes, SLICE):
        part = slice(lo, lo + SLICE)
        yield from op_events(device[part], graph.names[part], graph.ops[part], schedule.start[part],
                             schedule.finish[part], on_path[part])
    for d in range(k):
        yield from memory_events(d, *profile.timeline(d), schedule.makespan)
    yield from flow_events(device[path], schedule.start[path])
    yield from transfers


def _transfers(graph, cluster, device, schedule, path_transfers):
    """(link thread names, a generator of transfer events) of an emulated schedule."""
    if len(schedule.transfer_edge) == 0:
        return [], iter(())
    k = cluster.num_devices
    edge = schedule.transfer_edge
    src = graph.edge_src[edge]
    link = device[src] * k + schedule.transfer_dst
    used, tid = np.unique(link, return_inverse=True)
    short = short_names(cluster.names)
    names = [f"{short[a // k]} -> {short[a % k]}" for a in used.tolist()]
    occupancy = schedule.transfer_bytes / cluster.bandwidth[device[src], schedule.transfer_dst]
    critical = np.zeros(len(edge), bool)
    critical[path_transfers] = True

    def events():
        for lo in range(0, len(edge), SLICE):
            part = slice(lo, lo + SLICE)
            tensor = [f"{graph.names[s]}:{max(slot, 0)}" if slot >= 0 else f"^{graph.names[s]}"
                      for s, slot in zip(src[part].tolist(), graph.edge_slot[edge[part]].tolist())]
            yield from transfer_events(k, tid[part] + 1, tensor, schedule.transfer_send[part],
                                       schedule.transfer_send[part] + occupancy[part],
                                       schedule.transfer_bytes[part], schedule.transfer_arrival[part],
                                       critical[part])
    return names, events()

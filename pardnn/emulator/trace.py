"""The emulated step as trace events (pardnn.io.trace_events gives the layout):
every op on its device's track, every transfer on its link's, each device's memory
as a counter, and the critical path marked (pardnn.emulator.critical_path)."""

from __future__ import annotations

import numpy as np

from pardnn.emulator.critical_path import critical_path
from pardnn.io.trace_events import (flow_events, memory_events, op_events, short_names, tracks,
                                    transfer_events)


def emulated_step(graph, cluster, device, schedule, profile) -> list:
    """Trace events of an emulated step (`schedule`, memory `profile`) of placement
    `device` on `cluster`, with its critical path marked."""
    k = cluster.num_devices
    device = np.asarray(device, np.int64)
    path, path_transfers = critical_path(graph, device, schedule)
    on_path = np.zeros(graph.num_nodes, bool)
    on_path[path] = True
    events = op_events(device, graph.names, graph.ops, schedule.start, schedule.finish, on_path)
    links, transfers = _transfers(graph, cluster, device, schedule, path_transfers)
    for d in range(k):
        events += memory_events(d, *profile.timeline(d), schedule.makespan)
    events += flow_events(device[path], schedule.start[path])
    return tracks(cluster.names, links) + events + transfers




def _transfers(graph, cluster, device, schedule, path_transfers):
    """(link thread names, transfer events) of an emulated schedule."""
    if len(schedule.transfer_edge) == 0:
        return [], []
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
    tensor = [f"{graph.names[s]}:{max(slot, 0)}" if slot >= 0 else f"^{graph.names[s]}"
              for s, slot in zip(src.tolist(), graph.edge_slot[edge].tolist())]
    return names, transfer_events(k, tid + 1, tensor, schedule.transfer_send,
                                  schedule.transfer_send + occupancy, schedule.transfer_bytes,
                                  schedule.transfer_arrival, critical)

"""The emulator as a placer sees it: placers import no emulator (they are functions of
the graph and the cluster), so the pipeline hands them this one to judge their own
trial placements (ParDNN Step 1's refinement, the hierarchical plan's choice).

A trial that cannot win costs no emulation: the lower bounds of ONE placement here
(`busiest_device_us`, `longest_path_us`, joined by `cannot_beat`) prune it, at a
fraction of an emulation's cost. They are not the bound on every placement's step
that report.json gives (pardnn.pipeline.bounds.step_lower_bound). Under the
scheduler's model (pardnn.emulator.scheduler) a device runs one op at a time, so the
step lasts at least the work placed on its busiest device; and a node starts no
earlier than each input arrives, a cross-device input no earlier than its producer's
finish plus the transfer's `bytes / bandwidth + latency`, so the step lasts at least
the costliest path with those transfer costs on the cut edges. Both ignore queueing
and link contention, which only add time.
"""

import math

import numpy as np

from pardnn.emulator.scheduler import plan_transfers, simulate
from pardnn.graph.levels import bottom_levels
from pardnn.graph.op_rates import node_times


def emulate(graph, cluster, device, beat: float = math.inf, paths: bool = True):
    """The emulated Schedule of placement `device`, or None when a lower bound of this
    placement (`cannot_beat`, the cheaper one first) proves it no faster than `beat`
    (with a margin of 1e-9 for rounding): a trial that cannot win costs no emulation.
    `paths=False` tries only the busiest-device bound: the longest-path bound costs
    about half an emulation, and a batch of moves from a placement whose step is
    known seldom lengthens its longest path past that step (docs/algorithm.md)."""
    if beat < math.inf and cannot_beat(graph, cluster, device, beat, paths):
        return None
    return simulate(graph, cluster, device)


def cannot_beat(graph, cluster, device, makespan, paths: bool = True) -> bool:
    """True when a lower bound of placement `device` proves it no faster than `makespan`."""
    beat = makespan * (1.0 + 1e-9)
    return (busiest_device_us(graph, cluster, device) >= beat
            or (paths and longest_path_us(graph, cluster, device) >= beat))


def busiest_device_us(graph, cluster, device) -> float:
    """The work placed on the busiest device of placement `device` (one bincount, far
    cheaper than the path)."""
    if graph.num_nodes == 0:
        return 0.0
    return float(np.bincount(np.asarray(device, np.int64), node_times(graph, cluster, device),
                             minlength=cluster.num_devices).max())


def longest_path_us(graph, cluster, device) -> float:
    """The costliest path of placement `device`, each cut edge costing its transfer's
    `bytes / bandwidth + latency`."""
    if graph.num_nodes == 0:
        return 0.0
    device = np.asarray(device, np.int64)
    edge_transfer, _, _, occupancy, latency = plan_transfers(graph, cluster, device)
    cross = edge_transfer >= 0
    edge_cost = np.zeros(graph.num_edges)
    edge_cost[cross] = occupancy[edge_transfer[cross]] + latency[edge_transfer[cross]]
    return float(bottom_levels(graph, node_times(graph, cluster, device), edge_cost).max())

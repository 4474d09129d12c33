"""ParDNN Step 1, partitioning to minimise the makespan (thesis §4.1.1): slicing,
mapping, refinement. `place` is the first candidate of `--algorithm pardnn`
(pardnn.pipeline.portfolio), and the placer pardnn-hier runs within each host.

Memory is not considered here; Step 2 (pardnn.repair, through the pipeline's judge)
fixes overflows. Refinement judges its trials with `emulate`, which the pipeline
lends (pardnn.emulator.trial.emulate).
"""

import time
from dataclasses import dataclass

import numpy as np

from pardnn.graph.constraints import allowed_devices
from pardnn.graph.edge_costs import mean_edge_costs
from pardnn.placers.step1_phases.mapping import map_clusters
from pardnn.placers.step1_phases.refinement import refine
from pardnn.placers.step1_phases.slicing import slice_graph


@dataclass
class Step1:
    device: np.ndarray              # int32 per node, after refinement
    mapped: np.ndarray              # int32 per node, before refinement
    mapped_makespan_us: float       # emulated
    makespan_us: float              # emulated
    initially_merged: int           # secondary clusters placed by initial merging
    num_secondary: int
    swaps: int
    switches: int
    followed: int
    one_device: bool
    affinity: bool                  # refinement started from the affinity placement
    schedule: object                # the emulated Schedule of `device`

    @property
    def output(self) -> str:
        """What Step 1 returned (report.json's `step1_output`): "one-device", "affinity"
        (refinement started from the affinity placement) or "thesis"."""
        return "one-device" if self.one_device else "affinity" if self.affinity else "thesis"


def place(graph, cluster, timings=None, *, emulate) -> np.ndarray:
    """Device index (int32) per node; stage seconds go into `timings`."""
    return partition(graph, cluster, timings, emulate=emulate).device


def partition(graph, cluster, timings=None, *, emulate) -> Step1:
    """Run Step 1 and say what each stage did."""
    timings = {} if timings is None else timings
    allowed = allowed_devices(graph, cluster)
    k = cluster.num_devices
    t0 = time.perf_counter()
    edge_cost = mean_edge_costs(graph, cluster)
    slices = slice_graph(graph, k, edge_cost, allowed)
    t1 = time.perf_counter()
    mapping = map_clusters(graph, cluster, slices, edge_cost, allowed)
    t2 = time.perf_counter()
    result = refine(graph, cluster, slices, mapping, allowed, rounds=k, emulate=emulate)
    timings.update(slicing=t1 - t0, mapping=t2 - t1, refine=time.perf_counter() - t2)
    return Step1(result.device.astype(np.int32), mapping.device, result.mapped_makespan_us,
                 result.makespan_us, len(mapping.merged),
                 slices.num_clusters - slices.num_primary, result.swaps, result.switches,
                 result.followed, result.one_device, result.affinity, result.schedule)

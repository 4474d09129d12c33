"""The emulator as a placer sees it: placers import no emulator (they are functions of
the graph and the cluster), so the pipeline hands them this one to judge their own
trial placements (ParDNN Step 1's refinement, the hierarchical plan's choice).
"""

import math

from pardnn.emulator.bounds import busiest_device_us, longest_path_us
from pardnn.emulator.scheduler import simulate


def emulate(graph, cluster, device, beat: float = math.inf, paths: bool = True):
    """The emulated Schedule of placement `device`, or None when a lower bound
    (pardnn.emulator.bounds, the cheaper one first) proves it no faster than `beat`
    (with a margin of 1e-9 for rounding): a trial that cannot win costs no emulation.
    `paths=False` tries only the busiest-device bound: the longest-path bound costs
    about half an emulation, and a batch of moves from a placement whose step is
    known seldom lengthens its longest path past that step (docs/algorithm.md)."""
    if beat < math.inf and cannot_beat(graph, cluster, device, beat, paths):
        return None
    return simulate(graph, cluster, device)


def cannot_beat(graph, cluster, device, makespan, paths: bool = True) -> bool:
    """True when a lower bound proves `device` no faster than `makespan`."""
    beat = makespan * (1.0 + 1e-9)
    return (busiest_device_us(graph, cluster, device) >= beat
            or (paths and longest_path_us(graph, cluster, device) >= beat))

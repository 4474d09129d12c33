"""The lower bound on the emulated step of every placement of a graph on a cluster
(docs/bounds.md): `step_lower_bound`, the one function that report.json's
`lower_bound_us`, `pardnn explain`'s bounds and `pardnn capacity` read.

It is the largest of its named parts (`StepLowerBound`): the emulator's
(pardnn.emulator.bounds.every_placement_parts: the critical path and total work at
each op's fastest device's time, a path with the transfers every placement forces,
and on small graphs the interval bound) and, on graphs the exact model takes
(pardnn.placers.exact: small ones, devices at the profile's rate), the model's proven
bound, solved once per graph and cluster (the graph's memo; the exact candidate of
`--algorithm pardnn` shares that solve).

The bounds of ONE placement, which refinement prunes its trials with, are apart:
pardnn.emulator.trial.cannot_beat.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from pardnn.emulator.bounds import every_placement_parts
from pardnn.placers import exact

# The parts, in the order a tie is named in: the first of the largest binds.
PARTS = ("critical_path_us", "work_per_device_us", "forced_transfers_us", "interval_us", "exact_model_us")


@dataclass(frozen=True)
class StepLowerBound:
    """No placement's emulated step on the cluster is shorter than `us`, the largest
    of these parts (docs/bounds.md has the proofs); a part is None where it was not
    computed."""

    critical_path_us: float             # the costliest path, each op on its fastest device, no communication
    work_per_device_us: float           # total work over the devices (at their rates)
    forced_transfers_us: float          # a path with the transfers every placement forces
    interval_us: float | None = None    # the interval bound (graphs of at most 2,000 nodes, K > 1)
    exact_model_us: float | None = None     # the exact model's proven bound (at most 400 nodes, rates 1)

    @property
    def parts(self) -> dict:
        """The parts computed, by name, in PARTS order."""
        return {name: getattr(self, name) for name in PARTS if getattr(self, name) is not None}

    @property
    def us(self) -> float:
        """The bound: the largest part (report.json's `lower_bound_us`)."""
        return max(self.parts.values())

    @property
    def binding(self) -> str:
        """The name of the part that gives the bound (the first of PARTS on ties)."""
        bound = self.us
        return next(name for name, value in self.parts.items() if value >= bound * (1 - 1e-12))


def step_lower_bound(graph, cluster, exact_model: bool = True, emulated: StepLowerBound | None = None
                     ) -> StepLowerBound:
    """The lower bound on the emulated step of every placement of `graph` on `cluster`,
    with its parts. `exact_model=False` leaves the exact model's part out (no CP-SAT
    solve: `evaluate`, a worker process); `emulated`: the bound found so elsewhere (a
    worker process), completed here."""
    bound = StepLowerBound(**every_placement_parts(graph, cluster)) if emulated is None else emulated
    if not exact_model or bound.exact_model_us is not None:
        return bound
    proven = exact.proven_bound_us(graph, cluster)
    return replace(bound, exact_model_us=proven) if proven > 0 else bound

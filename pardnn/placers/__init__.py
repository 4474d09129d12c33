"""The placers, one module per algorithm, listed in registry.py with their roles in
`--algorithm pardnn`'s portfolio: ParDNN's Step 1 (step1.py, its phases in
step1_phases/), the stage partition (stages.py), the exact CP-SAT model (exact.py),
hierarchical placement over hosts (hierarchical.py) and the baselines (etf.py,
topo.py, heft.py, linear.py, metis_cut.py, round_robin.py, single.py; their shared
helpers in common.py). Each is a function of the graph and the cluster; the pipeline
repairs and judges what it returns.

Its public surface is the registry (`from pardnn.placers import registry`:
`registry.names()`, `registry.run(name, graph, cluster)`), not imported here, since
the placers import one another through the package."""

__all__ = ["registry"]

"""The graph model every placer works on: the CostGraph (costgraph.py), its levels
(levels.py), the placement rules (constraints.py), what each node holds in memory
(node_memory.py), what an edge costs when cut (edge_costs.py) and which tensors data
parallelism averages across replicas (averaging.py)."""

from pardnn.graph.costgraph import NORMAL, REFERENCE, RESIDUAL, CostGraph

__all__ = ["NORMAL", "REFERENCE", "RESIDUAL", "CostGraph"]

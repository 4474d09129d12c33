"""Memory accounting per node, as the emulator counts it (docs/emulator.md): what a
node holds for the whole step, and what it holds only until its consumers ran."""

import numpy as np

from pardnn.graph.costgraph import NORMAL, REFERENCE, RESIDUAL


def resident_bytes(graph) -> np.ndarray:
    """Bytes a node holds for the whole step, as the emulator counts them: its
    persistent state, plus its output if it is a variable (RESIDUAL); REFERENCE
    nodes alias their variable and hold nothing."""
    own = graph.persist_bytes + np.where(graph.kind == RESIDUAL, graph.out_bytes, 0)
    return np.where(graph.kind == REFERENCE, 0, own)


def transient_bytes(graph) -> np.ndarray:
    """Bytes of a NORMAL node's output, held from its start until its consumers ran."""
    return np.where(graph.kind == NORMAL, graph.out_bytes, 0)


def node_memory(graph) -> np.ndarray:
    """Bytes a node would hold if nothing were ever freed (the static estimate of
    Baechi's m-TOPO)."""
    return resident_bytes(graph) + transient_bytes(graph)

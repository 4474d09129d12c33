"""Which ops of a training step are its backward pass, by TF's names.

TF1's `tf.gradients` names the gradient ops under a `gradients` scope (`gradients_1`,
... for later calls) and TF2's GradientTape under `gradient_tape`; a micro-batched
step (issue 50) nests them under `micro_batch_<i>/`. The sums of a variable's
gradients that TF names at the top level (`AddN_7`) and the optimizer's updates come
after them. The orders of a pipelined step (pardnn.pipeline.schedule), the stage
baselines (pardnn.placers.pipeline_stages), recomputation (pardnn.pipeline.recompute)
and the bound that holds whatever is recomputed (pardnn.repair.live_at_once) read
the backward pass from here.
"""

from __future__ import annotations

import re

import numpy as np

BACKWARD = re.compile(r"(?:^|/)(?:gradients(?:_\d+)?|gradient_tape)/")


def is_backward(graph) -> np.ndarray:
    """bool per node: in a gradient scope (the backward pass)."""
    return np.array([bool(BACKWARD.search(name)) for name in graph.names], bool)


def backward_pass(graph) -> np.ndarray:
    """bool per node: in a gradient scope (`is_backward`), or downstream of one (the
    sums of a variable's gradients that TF names at the top level, `AddN_7`; the
    optimizer's updates)."""
    mark = is_backward(graph).tolist()
    for s, d in zip(graph.edge_src.tolist(), graph.edge_dst.tolist()):     # edges by source id: topological
        if mark[s]:
            mark[d] = True
    return np.array(mark, bool)

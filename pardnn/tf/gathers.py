"""Gather nodes of a traced TF2 step: IdentityN ops, bypassed.

Keras' optimizer all-reduces the gradients through the default replica context
even with one replica; `tf.custom_gradient` implements that as one `IdentityN`
over every gradient. An IdentityN is a pass-through (output i is input i), but
it is one op: TF runs it on one device, so every gradient is sent to that device
and held there at once. No memory model can place that below the size of all
gradients, so pardnn removes the gather from the step instead (docs/tf2.md,
"Gather nodes"): after a trace, each consumer of an IdentityN's output i takes
input i, and the IdentityN, now unused and stateless, is pruned by TF when it
instantiates the function. The profile (graph.pb) leaves it out, the placed
function does not ask for a device for it.
"""

from __future__ import annotations

import pardnn.tf.quiet_import  # noqa: F401  (first: hides TensorFlow's start-up lines)
import tensorflow as tf

GATHER_OPS = ("IdentityN",)


def bypass_gathers(graph, result):
    """Rewire the consumers of each IdentityN in `graph` (a FuncGraph being traced)
    to its inputs; returns (names of the bypassed ops, `result` with any of their
    outputs replaced by the inputs). An IdentityN that is a control input of
    another op is kept (its consumers wait for the whole gather)."""
    replaced, names = {}, []
    for op in graph.get_operations():
        if op.type not in GATHER_OPS or op._control_outputs:
            continue
        for out, source in zip(op.outputs, op.inputs):
            for consumer in out.consumers():
                for index, tensor in enumerate(consumer.inputs):
                    if tensor is out:
                        consumer._update_input(index, source)
            replaced[out.ref()] = source
        names.append(op.name)
    result = tf.nest.map_structure(
        lambda t: replaced.get(t.ref(), t) if isinstance(t, tf.Tensor) else t, result)
    return names, result


def drop_nodes(graph_def, names) -> None:
    """Remove the nodes `names` (bypassed gathers, consumed by none) from graph_def."""
    drop = set(names)
    keep = [node for node in graph_def.node if node.name not in drop]
    del graph_def.node[:]
    graph_def.node.extend(keep)

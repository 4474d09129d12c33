"""Recomputed ops carried into a placed tf.function (pardnn.tf.function.placed).

A plan with recomputation has recompute.csv beside placement.csv (pardnn.io.placement):
the edges into and out of each copy `pardnn_recompute/X` of the placed CostGraph.
After a trace, `carry_recompute` creates each copy in the FuncGraph as its original
op again (same type, attrs and colocation, its inputs mapped to the other copies,
marked as pardnn.tf.recompute.MARK), on its planned device, waiting for its trigger,
and points the readers' inputs at it, as pardnn.tf.recompute does to a GraphDef.
Copies are checked first: an op whose second run might not give the first one's
values (pardnn.tf.recompute.not_recomputable, from the ops' OpDefs) is refused.
An op of the plan that this trace lacks (fit's trace returns other outputs than the
profiled step) is stepped over: its copy is not made and its readers keep theirs.
"""

from __future__ import annotations

import os

import pardnn.tf.quiet_import  # noqa: F401  (first: hides TensorFlow's start-up lines)
from tensorflow.core.framework import attr_value_pb2

from pardnn.io.placement import read_recompute_csv
import pardnn.tf.op_defs as op_registry
from pardnn.tf.recompute import MARK, check_recomputable, not_recomputable, rewiring, twin_wait


def carry_recompute(graph, placement_csv, devices, requested) -> list:
    """Create the copies recompute.csv (beside `placement_csv`) names in `graph` (a
    traced FuncGraph) and rewire their readers; `devices`: op name -> planned device;
    each copy's device is recorded in `requested`. Returns the copies made."""
    path = os.path.join(os.path.dirname(os.path.abspath(str(placement_csv))), "recompute.csv")
    rows = read_recompute_csv(path)
    if not rows:
        return []
    plan = rewiring(rows)
    ops = {op.name: op for op in graph.get_operations()}
    wanted = [c for c, original in plan.originals.items() if original in ops]
    graph_def = graph.as_graph_def()
    refused = not_recomputable(graph_def, op_registry.from_tensorflow({n.op for n in graph_def.node}))
    check_recomputable([plan.originals[c] for c in wanted], refused, path)
    made = {}
    for copy in wanted:
        _make(graph, copy, plan, ops, made, devices)
    for copy, op in made.items():
        requested[copy] = op.device
    _rewire(plan, ops, made)
    return list(made)


def _make(graph, copy, plan, ops, made, devices):
    """Create `copy` (after the copies it reads) unless made already."""
    if copy in made:
        return made[copy]
    original = ops[plan.originals[copy]]
    mapping = plan.inputs.get(copy, {})
    inputs = []
    for tensor in original.inputs:
        source = mapping.get((tensor.op.name, tensor.value_index))
        if source is not None and source in plan.originals and plan.originals[source] in ops:
            tensor = _make(graph, source, plan, ops, made, devices).outputs[tensor.value_index]
        inputs.append(tensor)
    attrs = dict(original.node_def.attr)
    attrs[MARK] = attr_value_pb2.AttrValue(s=original.name.encode())
    op = graph._create_op_internal(original.type, inputs, dtypes=[t.dtype for t in original.outputs],
                                   name=copy + "/", attrs=attrs, op_def=original.op_def, compute_device=False)
    op._set_device(devices.get(copy) or original.device)
    waits = list(original.control_inputs) + [ops[t] for t in plan.triggers.get(copy, ()) if t in ops]
    texts = [t.name for t in op.inputs] + [f"^{w.name}" for w in waits]
    original_texts = [t.name for t in original.inputs] + [f"^{w.name}" for w in original.control_inputs]
    waits += [original] if twin_wait(texts, original_texts, original.name) else []
    op._add_control_inputs(list(dict.fromkeys(waits)))
    made[copy] = op
    return op


def _rewire(plan, ops, made):
    """Point each reader's inputs at the copies made, and add the control inputs on
    copies that ops other than copies wait for."""
    for name, mapping in plan.inputs.items():
        reader = ops.get(name)
        if reader is None:
            continue
        for i, tensor in enumerate(list(reader.inputs)):
            copy = made.get(mapping.get((tensor.op.name, tensor.value_index)))
            if copy is not None:
                reader._update_input(i, copy.outputs[tensor.value_index])
    for name, waits in plan.triggers.items():
        if name in ops:
            ops[name]._add_control_inputs([made[w] for w in waits if w in made])

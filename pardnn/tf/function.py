"""TF2 training steps: profile a `tf.function` and retrace it placed.

`profile_function(step_fn, args, steps, out_dir)` traces the step's Python
function afresh (the user's tf.function is not touched), with its gather nodes
bypassed (pardnn.tf.gathers), and profiles a copy of its graph: TF 2.21 records
no per-op step stats for eager function calls, so the function's GraphDef is
imported into a TF1 session (pardnn's session config, rewrites off) where each
captured variable becomes a VarHandleOp of the same name holding a copy of the
variable's value, and the step runs traced (RunOptions FULL_TRACE) like any TF1
profile. With `estimate=PRESET` nothing runs and no value is copied: Grappler
costs the step for one GPU of the preset (pardnn.tf.estimate), from the
variables' shapes and dtypes. graph.pb is that GraphDef, so the loader sees the
variables as resident memory, and every other node keeps its name in the trace.

`placed(step_fn, placement_csv)` returns a new tf.function that retraces the step's
Python function the same way under a device function giving every op its placed
device (names are stable from one trace of a function to the next), variable
reads and updates included; its trace refuses variables that are not on their
planned devices (pardnn.tf.variables creates them there). The plan's order
(order.csv) and recomputed ops (recompute.csv, pardnn.tf.recompute_trace) are
carried into each trace. `requested_devices(fn)`
gives the devices asked for. `check_function_placement(fn, args)` calls a fresh
placed function once and reads where TF ran each op from the function's
partition graphs.
"""

from __future__ import annotations

import contextlib
import datetime
import functools
import inspect
import os
import re

import numpy as np
import pardnn.tf.quiet_import  # noqa: F401  (first: hides TensorFlow's start-up lines)
import tensorflow as tf
from tensorflow.python.autograph.impl import api as autograph_api
from tensorflow.python.eager import context
from tensorflow.python.framework.ops import EagerTensor

from pardnn.base.errors import UserError
from pardnn.io.placement import read_order_csv
from pardnn.models import MAX_TRACED_STEPS
from pardnn.tf.estimate import costs_doc, estimate_graph, gpu_target
from pardnn.tf.gathers import bypass_gathers, drop_nodes
from pardnn.tf.plan_devices import local_device, read_devices
from pardnn.tf.profiling import traced_steps, write_profile_dir
from pardnn.tf.variables import creation_order, planned_variable_names, untouched_variables
from pardnn.tf.recompute_trace import carry_recompute
from pardnn.tf.rewrite import compare_partitions
from pardnn.tf.session import parse_profile_devices, session_config

tf1 = tf.compat.v1
_REQUESTED = "_pardnn_requested_devices"


def concrete_function(step_fn, args, kwargs=None):
    """step_fn's concrete function for args; UserError if step_fn is not a
    tf.function or the args do not fit its signature."""
    check_tf_function(step_fn)
    try:
        return step_fn.get_concrete_function(*args, **(kwargs or {}))
    except (TypeError, ValueError) as exc:
        lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
        why = lines[-1] if lines else type(exc).__name__
        raise UserError(f"args: {_name(step_fn)} cannot be traced with them ({why})") from None


def profile_function(step_fn, args, steps: int = 5, out_dir: str = "profile", kwargs=None,
                     devices: str = "cpu:1", meta=None, estimate=None, op_overhead_us=None,
                     precision=None, conv_efficiency=None) -> dict:
    """Profile the tf.function `step_fn` called with `args` into a profile dir that
    `pardnn place` reads; returns the profile.json contents.

    With `estimate` (a GPU preset, as `pardnn profile --estimate`) nothing runs:
    Grappler costs one step for that GPU from the variables' shapes and dtypes, so
    args may be tf.TensorSpecs and the variables shape-only stand-ins."""
    target = _estimate_target(estimate, op_overhead_us, precision, conv_efficiency)
    if not 1 <= steps <= MAX_TRACED_STEPS:
        raise UserError(f"steps: need 1 to {MAX_TRACED_STEPS} traced steps, got {steps}")
    cpu_devices, gpus = parse_profile_devices(devices, "devices", runs=target is None)
    check_tf_function(step_fn)
    retraced, trace = _retraced(step_fn)
    with _refusing_new_variables(step_fn):
        fn = concrete_function(retraced, args, kwargs)
    graph_def, variables = _replica_graph_def(fn)
    drop_nodes(graph_def, trace["bypassed"])
    _pin_argument_shapes(graph_def, fn, _in_signature_order(step_fn, args, kwargs))
    graph = tf.Graph()
    with graph.as_default():
        tf1.import_graph_def(graph_def, name="")
        profile_def = graph.as_graph_def(add_shapes=True)
    fetches = [t.name for t in fn.graph.outputs] + [op.name for op in fn.graph.control_outputs]
    doc = {"tf_version": tf.__version__, "api": "profile_function", "function": _name(step_fn),
           "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "fetches": fetches, "gathers_bypassed": trace["bypassed"],
           "variables": {name: v.name for name, v in creation_order(variables).items()},
           "variable_shapes": {name: v.shape.as_list() for name, v in variables.items()},
           "untouched_variables": untouched_variables(step_fn.python_function, variables.values()),
           **(meta or {})}
    if target is not None:
        run_metadata, info = estimate_graph(graph, [f.split(":")[0] for f in fetches], {}, target)
        metas = [run_metadata]
        doc.update(devices=[target.device], steps=1, warmup_steps=0, feeds=[],
                   costs=costs_doc(target, info))
    else:
        feed = _arg_feed(fn, _in_signature_order(step_fn, args, kwargs))
        metas, names = _measure(graph, variables, feed, fetches, steps, session_config(cpu_devices, gpus))
        doc.update(devices=names, steps=steps, feeds=sorted(feed), profile_devices=devices)
    write_profile_dir(out_dir, profile_def, metas, doc)
    return doc


@contextlib.contextmanager
def _refusing_new_variables(step_fn):
    """UserError when tracing step_fn creates variables (an optimizer built on its first
    step, a Keras layer first called there): they exist only from that trace on, so
    the profile would hold their initialisers and no later trace (`placed`) matches it."""
    created = []

    def creator(next_creator, **kwargs):
        variable = next_creator(**kwargs)
        created.append(variable.name)
        return variable
    with tf.variable_creator_scope(creator):
        yield
    if created:
        shown = ", ".join(created[:3]) + (f" and {len(created) - 3} more" if len(created) > 3 else "")
        raise UserError(f"step_fn: {_name(step_fn)} creates variables when traced ({shown}); create them "
                        f"before profiling: build the model, and the optimizer with "
                        f"optimizer.build(model.trainable_variables) (docs/tf2.md)")


def _estimate_target(estimate, op_overhead_us, precision, conv_efficiency=None):
    """The GPU Target of `estimate` (None: measure), op_overhead_us, precision and
    conv_efficiency checked."""
    if estimate is None:
        if any(v is not None for v in (op_overhead_us, precision, conv_efficiency)):
            raise UserError("op_overhead_us, precision and conv_efficiency apply to estimated costs: "
                            "give estimate=PRESET")
        return None
    if op_overhead_us is not None and not 0 <= op_overhead_us <= 1e6:
        raise UserError(f"op_overhead_us: cannot use {op_overhead_us!r} (give 0 to 1e6 microseconds)")
    return gpu_target(estimate, "estimate", op_overhead_us, precision, conv_efficiency)


def _measure(graph, variables, feed, fetches, steps, config):
    """(RunMetadata of `steps` traced steps of graph in a TF1 session whose variables
    hold copies of `variables`' values, the session's device names)."""
    for v in variables.values():
        if not v.is_initialized():
            raise UserError(f"variables: {v.name} holds no value (a shape-only stand-in); "
                            f"plan with estimate=PRESET, or build the model normally to measure it")
    values = {name: var.numpy() for name, var in variables.items()}
    with graph.as_default():
        init, init_feed = _variable_init(graph, values)
    with tf1.Session(graph=graph, config=config) as session:
        session.run(init, feed_dict=init_feed)
        metas = traced_steps(session, fetches, lambda step: feed, steps)
        return metas, [d.name for d in session.list_devices()]


def _replica_graph_def(fn):
    """The function's GraphDef with each captured variable's placeholder turned into
    a VarHandleOp of the same name; {node name: variable}. Other captured tensors
    stay placeholders and are fed their values."""
    by_handle = {id(v.handle): v for v in fn.graph.variables}
    graph_def = fn.graph.as_graph_def(add_shapes=True)
    nodes = {n.name: n for n in graph_def.node}
    variables = {}
    for external, internal in fn.graph.captures:
        if internal.dtype != tf.resource:
            continue
        var = by_handle.get(id(external))
        if var is None:
            raise UserError(f"step_fn: captures a resource that is not a variable "
                            f"({internal.op.name}); pardnn can only profile steps over variables")
        node = nodes[internal.op.name]
        node.op = "VarHandleOp"
        for key in list(node.attr):
            if key != "_output_shapes":
                del node.attr[key]
        node.attr["dtype"].type = var.dtype.as_datatype_enum
        node.attr["shape"].shape.CopyFrom(var.shape.as_proto())
        node.attr["shared_name"].s = node.name.encode()
        node.attr["container"].s = b""
        variables[node.name] = var
    return graph_def, variables


def _pin_argument_shapes(graph_def, fn, values):
    """Give the step's argument placeholders the shapes of the arguments profiled with
    (`values`: `_in_signature_order`) where the trace left dimensions unknown (a step
    whose input signature relaxes the batch: pardnn.keras): the graph, and so its costs
    and memory, is that of the batch it was given."""
    flat = [a for a in tf.nest.flatten(values, expand_composites=True)
            if isinstance(a, (tf.Tensor, np.ndarray, tf.Variable, tf.TensorSpec))]
    inputs = fn.inputs[:len(fn.inputs) - len(fn.graph.captures)]
    if len(flat) != len(inputs):
        return
    nodes = {n.name: n for n in graph_def.node}
    for tensor, value in zip(inputs, flat):
        shape = tf.TensorShape(value.shape)
        node = nodes.get(tensor.op.name)
        if node is None or node.op != "Placeholder" or not shape.is_fully_defined() \
                or tensor.shape.is_fully_defined() or not tensor.shape.is_compatible_with(shape):
            continue
        node.attr["shape"].shape.CopyFrom(shape.as_proto())
        if "_output_shapes" in node.attr:
            node.attr["_output_shapes"].list.shape[0].CopyFrom(shape.as_proto())


def _in_signature_order(step_fn, args, kwargs):
    """The call's arguments in the order of the concrete function's inputs, as TF binds
    them: the parameters that may be positional in the order of step_fn's signature
    (however they were given), then the keyword-only ones and **kwargs by sorted name
    (the order of a flattened dict, which the call's own kwargs dict would give to all)."""
    bound = inspect.signature(step_fn.python_function).bind(*args, **(kwargs or {}))
    bound.apply_defaults()          # a tensor default is an input too (others are dropped later)
    positional, named = [], {}
    for name, value in bound.arguments.items():
        kind = bound.signature.parameters[name].kind
        if kind == inspect.Parameter.VAR_POSITIONAL:
            positional.extend(value)
        elif kind == inspect.Parameter.VAR_KEYWORD:
            named.update(value)
        elif kind == inspect.Parameter.KEYWORD_ONLY:
            named[name] = value
        else:
            positional.append(value)
    return [positional, named]


def _arg_feed(fn, values):
    """Feed dict: the function's argument placeholders -> the given tensors' values
    (`values`, the call's arguments in the order of its inputs: `_in_signature_order`),
    then its captured (non-variable) tensors -> their values."""
    flat = [a for a in tf.nest.flatten(values, expand_composites=True)
            if isinstance(a, (tf.Tensor, np.ndarray, tf.Variable))]
    captured = [(e, i) for e, i in fn.graph.captures if i.dtype != tf.resource]
    inputs = fn.inputs[:len(fn.inputs) - len(fn.graph.captures)]
    if len(inputs) != len(flat):
        raise UserError(f"args: {len(flat)} tensors given, the step takes {len(inputs)}")
    feed = {t.name: np.asarray(a) for t, a in zip(inputs, flat)}
    feed.update({i.name: np.asarray(e) for e, i in captured})
    return feed


def _variable_init(graph, values):
    """Ops assigning each replica variable (name -> value) a copy of the value."""
    ops, feed = [], {}
    with tf.name_scope("pardnn_init"):
        for name, array in values.items():
            value = tf1.placeholder(tf.as_dtype(array.dtype), array.shape)
            handle = graph.get_tensor_by_name(name + ":0")
            ops.append(tf.raw_ops.AssignVariableOp(resource=handle, value=value))
            feed[value] = array
    return ops, feed


def placed(step_fn, placement_csv, around=None, relax_batch=False, follow=False):
    """A tf.function retracing step_fn's Python function with every op on the device
    placement_csv (a `pardnn place` placement.csv) gives it. Its trace refuses a
    placement of another step and variables that are not where the plan says.
    `around`, if given, makes a context manager each trace runs inside
    (pardnn.keras: Keras' name counters of the build, the plan's variable creator).
    With `relax_batch`, the step is traced once, on its first call, with the first
    dimension of every argument unknown (`relaxed_batch`): the trace a step profiled
    with such a signature has, whatever batch size comes (fit's last, partial batch).
    With `follow`, step_fn is another step over the same variables than the one
    placed (a Keras model's test_step or predict_step under its train_step's plan):
    its ops follow the placement (`_follow_placement`) instead of having to be its."""
    check_tf_function(step_fn)
    devices = read_devices(placement_csv)
    names = planned_variable_names(placement_csv)
    requested = {}

    def device_of(op):
        requested[op.name] = devices.get(op.name, "")
        return requested[op.name]

    def check(graph, bypassed):
        for name in bypassed:
            requested.pop(name, None)
        if follow:
            requested.update(_follow_placement(graph, devices, set(bypassed)))
            return
        _check_names(graph, devices, placement_csv, step_fn, set(bypassed))
        _check_variables(graph, devices, placement_csv, names)
        carry_recompute(graph, placement_csv, devices, requested)
        _carry_order(graph, placement_csv)

    if relax_batch:
        fn = _BatchRelaxed(lambda signature: _retraced(step_fn, device_of, requested.clear, check, around,
                                                       signature)[0])
    else:
        fn, _ = _retraced(step_fn, device_of, requested.clear, check, around)
    setattr(fn, _REQUESTED, requested)
    return fn


def _carry_order(graph, placement_csv):
    """The order a placement carries (order.csv beside placement.csv, pardnn.graph.order)
    as control inputs of the traced step's ops: `after` waits for `before`. Its edges
    chain each device's ops; an op of the profile that this trace lacks (fit's trace
    returns other outputs than the profiled step's) is stepped over, so the ops that
    are here keep their order."""
    path = os.path.join(os.path.dirname(os.path.abspath(str(placement_csv))), "order.csv")
    rows = read_order_csv(path)
    present = {op.name: op for op in graph.get_operations()}
    following = dict(rows)
    for before, _ in rows:
        if before not in present:
            continue
        after, seen = following.get(before), set()
        while after is not None and after not in present and after not in seen:
            seen.add(after)
            after = following.get(after)
        if after is not None and after in present:
            present[after]._add_control_input(present[before])


def relaxed_batch(value):
    """tf.TensorSpecs of `value` (a nest of tensors, arrays or specs) with the first
    dimension of each unknown: one trace serves every batch size."""
    def spec(leaf):
        leaf = leaf if isinstance(leaf, (tf.Tensor, tf.TensorSpec)) else tf.convert_to_tensor(leaf)
        shape = leaf.shape.as_list() if leaf.shape.rank is not None else None
        return tf.TensorSpec(shape if not shape else [None] + shape[1:], leaf.dtype)
    return tf.nest.map_structure(spec, value)


class _BatchRelaxed:
    """A placed step whose tf.function is made on the first call, with that call's
    arguments' `relaxed_batch` specs as its input signature."""

    def __init__(self, make):
        self._make, self._fn = make, None

    def __call__(self, *args):
        if self._fn is None:
            self._fn = self._make([relaxed_batch(a) for a in args])
        return self._fn(*args)


def _retraced(step_fn, device_fn=None, before=None, after=None, around=None, input_signature=None):
    """(a new tf.function tracing step_fn's Python function, its trace state).

    Each trace runs the AutoGraph-converted function (as tf.function would) under
    `device_fn` (and inside `around()`, if given; with `input_signature` for
    step_fn's), then bypasses the graph's gathers (pardnn.tf.gathers); state
    "bypassed" names them, and `after(graph, bypassed)` may check the trace."""
    python_fn = step_fn.python_function
    converted = _autograph(python_fn)
    state = {"bypassed": []}

    @functools.wraps(python_fn)
    @tf.autograph.experimental.do_not_convert         # keeps our own errors as written
    def traced(*args, **kwargs):
        graph = tf1.get_default_graph()
        if before is not None:
            before()
        with around() if around else contextlib.nullcontext(), _named_captures(graph), \
                graph.device(_own_ops(graph, device_fn)) if device_fn else contextlib.nullcontext():
            result = converted(*args, **kwargs)
        state["bypassed"], result = bypass_gathers(graph, result)
        if after is not None:
            after(graph, state["bypassed"])
        return result

    return tf.function(traced, input_signature=input_signature or step_fn.input_signature), state


def _own_ops(graph, device_fn):
    """device_fn for the ops of `graph`, no device for those of a function traced inside
    it (an inner tf.function's body, a tf.cond's branches: they inherit the device
    functions of the graph they are traced in). The placement names ops of `graph`
    only: an inner op of the same name (an inner function's `NoOp`, `MatMul`) is
    another op, which runs where the op calling it runs."""
    def device(op):
        return device_fn(op) if op.graph is graph else ""
    return device


@contextlib.contextmanager
def _named_captures(graph):
    """While `graph` traces, an eager tensor it captures without a name (the variable
    handles a call of an inner tf.function passes on: Keras' grouped convolution on a
    CPU calls one, compiled with XLA) is named `captured` in the current name scope,
    as any other op, not by TF's process-wide counter (`conv/1251`): the names of one
    trace are then those of the next, and match the profile's."""
    capture = graph.capture

    def named(tensor, name=None, shape=None):
        if name is None and isinstance(tensor, EagerTensor):
            name = "captured"
        return capture(tensor, name, shape)
    inherited = getattr(capture, "__func__", None) is type(graph).capture
    graph.capture = named
    try:
        yield
    finally:
        if inherited:
            del graph.capture
        else:                           # a trace inside a trace of this graph: its own
            graph.capture = capture


def _autograph(python_fn):
    """python_fn converted by AutoGraph, as tf.function converts it (a bound method's
    function is converted, then bound again); as is where AutoGraph cannot convert
    it (no source code, as for `python -c`), as tf.function falls back."""
    try:
        if inspect.ismethod(python_fn):
            return functools.partial(tf.autograph.to_graph(python_fn.__func__), python_fn.__self__)
        return tf.autograph.to_graph(python_fn)
    except autograph_api.ConversionError:
        return python_fn


def check_tf_function(step_fn):
    """UserError unless step_fn is a tf.function."""
    if not isinstance(step_fn, tf.types.experimental.PolymorphicFunction):
        raise UserError(f"step_fn: {_name(step_fn)} is not a tf.function "
                        f"(decorate the training step with @tf.function)")


def requested_devices(fn) -> dict:
    """Op name -> device a placed function asked for in its latest trace."""
    return dict(getattr(fn, _REQUESTED))


def _check_names(graph, devices, path, step_fn, bypassed):
    names = [op.name for op in graph.get_operations() if op.name not in bypassed]
    missing = [n for n in names if n not in devices]
    if missing:
        raise UserError(f"{path}: does not match the trace of {_name(step_fn)}: {len(missing)} of its "
                        f"{len(names)} ops are not in the placement (e.g. {missing[0]!r}); place a "
                        f"profile of this step (pardnn.tf.profile_function)")


def _follow_placement(graph, devices, bypassed) -> dict:
    """Give every op of a trace the placement was not made for a device, and return
    them (op name -> device): an op taking a variable's handle goes where the variable
    is (TF would move it there), an op the placement names where it says (a Keras
    step's forward ops are named as the training step's), any other op with its
    first input, and one without inputs with its first consumer (else on the
    placement's first device)."""
    variables = {internal.op.name: local_device(external.device)
                 for external, internal in graph.captures if internal.dtype == tf.resource}
    ops = [op for op in graph.get_operations() if op.name not in bypassed]
    chosen = {}
    for op in ops:
        handles = [chosen.get(t.op.name) for t in op.inputs if t.dtype == tf.resource]
        if op.name in variables:
            chosen[op.name] = variables[op.name]
        elif handles and handles[0]:
            chosen[op.name] = handles[0]
        elif op.name in devices:
            chosen[op.name] = devices[op.name]
        else:
            chosen[op.name] = chosen.get(op.inputs[0].op.name) if op.inputs else None
    first = min(devices.values(), default="")
    for op in reversed(ops):
        if chosen[op.name] is None:
            consumers = [c for t in op.outputs for c in t.consumers()] + list(op._control_outputs)
            chosen[op.name] = next((chosen[c.name] for c in consumers if chosen.get(c.name)), first)
    for op in ops:
        op._set_device(chosen[op.name])
    return chosen


def _check_variables(graph, devices, path, names):
    """UserError naming the first variable the step captures that is not on its
    planned device (TF would run its reads and updates there, not where planned);
    `names`: variable node -> variable name."""
    for external, internal in graph.captures:
        want = devices.get(internal.op.name)
        if internal.dtype != tf.resource or not want:
            continue
        have = local_device(external.device)
        if have != want:
            name = names.get(internal.op.name, internal.op.name)
            raise UserError(f"{path}: variable {name!r} is on {have}, the plan puts it on {want}; "
                            f"create the model's variables under pardnn.tf.variables_placed({path!r})")


def check_function_placement(fn, args, kwargs=None):
    """Call the placed function `fn` for the first time; (result, PlacementCheck)
    of where TF ran each op against what fn asked for."""
    result, run_metadata = _with_run_metadata(lambda: fn(*args, **(kwargs or {})))
    partitions = [p for g in run_metadata.function_graphs for p in g.partition_graphs]
    if not partitions:
        raise UserError("check_function_placement: no partition graphs; call it on a placed "
                        "function that has not run yet (they are recorded when TF instantiates it)")
    return result, compare_partitions(requested_devices(fn), partitions)


def check_nested_placement(fn, call):
    """Run `call()`, which calls the placed function `fn` from its own tf.function
    for the first time (`model.fit` with `model.train_step = fn`); (result,
    PlacementCheck) of fn's ops, found in the caller's partition graphs under the
    prefix TF gives an inlined call (StatefulPartitionedCall/.../op)."""
    result, run_metadata = _with_run_metadata(call)
    requested = requested_devices(fn)
    partitions = [_inlined(p, requested) for g in run_metadata.function_graphs for p in g.partition_graphs]
    if not any(p.node for p in partitions):
        raise UserError("check_nested_placement: none of fn's ops ran inlined in a caller; call it "
                        "on a placed function that has not run yet, with a call that runs it")
    return result, compare_partitions(requested, partitions)


_INLINED = re.compile(r"^((Stateful)?PartitionedCall(_\d+)?/)+")


def _inlined(partition, requested):
    """The nodes of a partition graph inlined from a call of a function whose ops
    are `requested`, renamed to their names in that function."""
    graph = tf1.GraphDef()
    for node in partition.node:
        prefix = _INLINED.match(node.name)
        if prefix and node.name[prefix.end():] in requested:
            graph.node.add().CopyFrom(node)
            graph.node[-1].name = node.name[prefix.end():]
    return graph


def _with_run_metadata(call):
    """(call(), the RunMetadata TF recorded while it ran)."""
    ctx = context.context()
    ctx.export_run_metadata()          # drops function graphs other functions left there
    ctx.enable_run_metadata()
    try:
        result = call()
        return result, ctx.export_run_metadata()
    finally:
        ctx.disable_run_metadata()


def _name(fn):
    return getattr(fn, "__name__", None) or type(fn).__name__

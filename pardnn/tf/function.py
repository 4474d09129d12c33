"""TF2 training steps: profile a `tf.function` and retrace it placed.

`profile_function(step_fn, args, steps, out_dir)` traces the step into a concrete
function and profiles a copy of its graph: TF 2.21 records no per-op step stats for
eager function calls, so the function's GraphDef is imported into a TF1 session
(pardnn's session config, rewrites off) where each captured variable becomes a
VarHandleOp of the same name holding a copy of the variable's value, and the step
runs traced (RunOptions FULL_TRACE) like any TF1 profile. The user's variables are
not touched. graph.pb is that GraphDef, so the loader sees the variables as
resident memory, and every other node keeps its name in the trace.

`placed(step_fn, placement_csv)` returns a new tf.function that retraces the step's
Python function under a device function giving every op its placed device (names
are stable from one trace of a function to the next). Variables live where they
were created, so an op that takes a variable's handle follows the variable, as TF
would move it there anyway; `requested_devices(fn)` gives the devices asked for.
`check_function_placement(fn, args)` calls a fresh placed function once and reads
where TF ran each op from the function's partition graphs.
"""

from __future__ import annotations

import csv
import datetime
import functools
import inspect

import numpy as np
import pardnn.tf.quiet_import  # noqa: F401  (first: hides TensorFlow's start-up lines)
import tensorflow as tf
from tensorflow.python.eager import context

from pardnn.errors import UserError
from pardnn.tf.profiling import traced_steps, write_profile_dir
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
                     devices: str = "cpu:1", meta=None) -> dict:
    """Profile the tf.function `step_fn` called with `args` into a profile dir that
    `pardnn place` reads; returns the profile.json contents."""
    if steps < 1:
        raise UserError(f"steps: need at least 1 traced step, got {steps}")
    cpu_devices, gpus = parse_profile_devices(devices, "devices")
    fn = concrete_function(step_fn, args, kwargs)
    graph_def, variables = _replica_graph_def(fn)
    feed = _arg_feed(fn, args, kwargs)
    values = {name: var.numpy() for name, var in variables.items()}
    graph = tf.Graph()
    with graph.as_default():
        tf1.import_graph_def(graph_def, name="")
        profile_def = graph.as_graph_def(add_shapes=True)
        init, init_feed = _variable_init(graph, values)
    fetches = [t.name for t in fn.graph.outputs] + [op.name for op in fn.graph.control_outputs]
    with tf1.Session(graph=graph, config=session_config(cpu_devices, gpus)) as session:
        session.run(init, feed_dict=init_feed)
        metas = traced_steps(session, fetches, lambda step: feed, steps)
        doc = {"tf_version": tf.__version__, "devices": [d.name for d in session.list_devices()],
               "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
               "steps": steps, "api": "profile_function", "function": _name(step_fn),
               "fetches": fetches, "feeds": sorted(feed), "profile_devices": devices,
               "variables": {name: v.name for name, v in variables.items()}, **(meta or {})}
    write_profile_dir(out_dir, profile_def, metas, doc)
    return doc


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


def _arg_feed(fn, args, kwargs):
    """Feed dict: the function's argument placeholders -> the given tensors' values,
    then its captured (non-variable) tensors -> their values."""
    flat = [a for a in tf.nest.flatten((list(args), kwargs or {}), expand_composites=True)
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


def placed(step_fn, placement_csv):
    """A tf.function retracing step_fn's Python function with every op on the device
    placement_csv (a `pardnn place` placement.csv) gives it."""
    check_tf_function(step_fn)
    devices = read_devices(placement_csv)
    python_fn = step_fn.python_function
    converted = _autograph(python_fn)
    requested = {}

    @functools.wraps(python_fn)
    @tf.autograph.experimental.do_not_convert         # keeps our own errors as written
    def traced(*args, **kwargs):
        follow = _variable_devices(concrete_function(step_fn, args, kwargs))
        graph = tf1.get_default_graph()
        requested.clear()
        with graph.device(functools.partial(_device_of, devices, follow, requested)):
            result = converted(*args, **kwargs)
        _check_names(graph, devices, placement_csv, step_fn)
        return result

    fn = tf.function(traced, input_signature=step_fn.input_signature)
    setattr(fn, _REQUESTED, requested)
    return fn


def _autograph(python_fn):
    """python_fn converted by AutoGraph, as tf.function converts it (a bound method's
    function is converted, then bound again)."""
    if inspect.ismethod(python_fn):
        return functools.partial(tf.autograph.to_graph(python_fn.__func__), python_fn.__self__)
    return tf.autograph.to_graph(python_fn)


def check_tf_function(step_fn):
    """UserError unless step_fn is a tf.function."""
    if not isinstance(step_fn, tf.types.experimental.PolymorphicFunction):
        raise UserError(f"step_fn: {_name(step_fn)} is not a tf.function "
                        f"(decorate the training step with @tf.function)")


def requested_devices(fn) -> dict:
    """Op name -> device a placed function asked for in its latest trace."""
    return dict(getattr(fn, _REQUESTED))


def _variable_devices(fn):
    """Captured variable placeholder name -> the variable's device."""
    return {internal.op.name: external.device for external, internal in fn.graph.captures
            if internal.dtype == tf.resource}


def _device_of(devices, follow, requested, op):
    """An op's device: its variable's, if it takes a handle, else the placement's."""
    device = follow.get(op.name)
    for t in op.inputs:
        if device is None and t.dtype == tf.resource:
            device = follow.get(t.op.name) or t.op.device or None
    device = device or devices.get(op.name, "")
    requested[op.name] = device
    return device


def _check_names(graph, devices, path, step_fn):
    names = [op.name for op in graph.get_operations()]
    missing = [n for n in names if n not in devices]
    if missing:
        raise UserError(f"{path}: does not match the trace of {_name(step_fn)}: {len(missing)} of its "
                        f"{len(names)} ops are not in the placement (e.g. {missing[0]!r}); place a "
                        f"profile of this step (pardnn.tf.profile_function)")


def read_devices(path) -> dict:
    """Node name -> device of a placement.csv, every device one this process has."""
    known = {_local(d.name) for d in tf.config.list_logical_devices()}
    try:
        with open(path, newline="") as f:
            rows = list(csv.reader(f))
    except OSError as exc:
        raise UserError(f"{path}: cannot read ({exc.strerror})") from None
    if not rows or [h.strip() for h in rows[0][:2]] != ["node", "device"]:
        raise UserError(f"{path}:1: expected the header 'node,device'")
    devices = {}
    for lineno, row in enumerate(rows[1:], start=2):
        if len(row) < 2:
            raise UserError(f"{path}:{lineno}: expected 'node,device'")
        device = _local(row[1].strip())
        if device not in known:
            raise UserError(f"{path}:{lineno}: device {row[1].strip()!r} is not one of this process's "
                            f"devices ({', '.join(sorted(known))})")
        devices[row[0]] = device
    return devices


def _local(name) -> str:
    """A device name of this process without its job/replica/task: /device:CPU:1."""
    spec = tf.DeviceSpec.from_string(name)
    if spec.job not in (None, "localhost") or spec.task not in (None, 0):
        return name
    return tf.DeviceSpec(device_type=spec.device_type, device_index=spec.device_index).to_string()


def check_function_placement(fn, args, kwargs=None):
    """Call the placed function `fn` for the first time; (result, PlacementCheck)
    of where TF ran each op against what fn asked for."""
    ctx = context.context()
    ctx.enable_run_metadata()
    try:
        result = fn(*args, **(kwargs or {}))
        run_metadata = ctx.export_run_metadata()
    finally:
        ctx.disable_run_metadata()
    partitions = [p for g in run_metadata.function_graphs for p in g.partition_graphs]
    if not partitions:
        raise UserError("check_function_placement: no partition graphs; call it on a placed "
                        "function that has not run yet (they are recorded when TF instantiates it)")
    return result, compare_partitions(requested_devices(fn), partitions)


def _name(fn):
    return getattr(fn, "__name__", None) or type(fn).__name__

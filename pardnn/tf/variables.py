"""TF2 variables where the plan says, and shape-only variables for planning.

Both are `tf.variable_creator_scope`s, so they see every variable Keras or the
user creates (weights, optimizer slots, metric and seed-generator state):

- `variables_placed(placement_csv)` creates each variable on the device the
  placement gives its variable node. Variables are matched to plan entries by
  name (the name `profile_function` records in profile.json `variables`, which
  `pardnn place` copies next to placement.csv); variables sharing a name (TF
  allows it) are matched in creation order. A variable the plan does not know is an error
  naming it and the nearest known names, unless `others=DEVICE` says where such
  variables go. A variable the step never touches (Keras' Normalization reads its
  statistics into constants when built), which profile.json lists under
  `untouched_variables`, goes to `others`, or to the host, /device:CPU:0.
- `shape_only_variables()` creates uninitialised variables: a handle with the
  variable's shape and dtype and no buffer, enough to trace and plan a step
  (`profile_function(..., estimate=PRESET)`) without allocating the model. An
  initial value given as a function (Keras' initialisers) is traced in a
  scratch graph for its shape, never run.
"""

from __future__ import annotations

import contextlib
import difflib
import json
import os

import pardnn.tf.quiet_import  # noqa: F401  (first: hides TensorFlow's start-up lines)
import tensorflow as tf
from tensorflow.python.ops import gen_resource_variable_ops, resource_variable_ops
from tensorflow.python.trackable.base import Trackable

from pardnn.base.errors import UserError
from pardnn.tf.plan_devices import known_devices, local_device, read_devices

UNTOUCHED_DEVICE = "/device:CPU:0"      # a variable the step never touches: host memory


@contextlib.contextmanager
def shape_only_variables():
    """Variables created inside hold no memory: shape and dtype only."""
    with tf.variable_creator_scope(_shape_only):
        yield


def _shape_only(next_creator, **kwargs):
    shape, dtype = _shape_and_dtype(kwargs)
    with tf.init_scope():           # created while a step traces (a lazily built optimizer): eager too
        variable = resource_variable_ops.UninitializedVariable(
            shape=shape, dtype=dtype, name=kwargs.get("name"), trainable=kwargs.get("trainable"))
    variable.__class__ = _ShapeOnlyVariable
    variable._pardnn_initial = kwargs.get("initial_value")
    return variable


class _ShapeOnlyVariable(resource_variable_ops.ResourceVariable):
    """An UninitializedVariable (no value, no memory) that traces as a ResourceVariable
    does: TF skips `tf.cast` to a variable's own dtype only for ResourceVariables, so
    Keras' mixed-precision casts of other variables named their reads "Cast/Cast/..."
    and a plan made shape-only did not match the real model's trace. Its state is the
    UninitializedVariable's (both classes only add methods to BaseResourceVariable).

    Read eagerly (a layer that reads its own variables when built: Keras'
    Normalization, a custom layer's build()), it is materialised first: given its
    real initial value, once, so the read is the value the real model's would be,
    not an empty tensor. A read while a step is traced stays symbolic, and a variable
    nobody reads never holds memory."""

    def _materialise(self):
        initial = getattr(self, "_pardnn_initial", None)
        if initial is None or not tf.executing_eagerly():
            return
        self._pardnn_initial = None
        if self.is_initialized():          # assigned already (Keras' adapt())
            return
        with tf.init_scope(), tf.device(self.device):
            value = tf.convert_to_tensor(initial() if callable(initial) else initial, dtype=self.dtype)
            gen_resource_variable_ops.assign_variable_op(self.handle, value)

    def _read_variable_op(self, no_copy=False):
        self._materialise()
        return super()._read_variable_op(no_copy=no_copy)

    def sparse_read(self, indices, name=None):
        self._materialise()
        return super().sparse_read(indices, name=name)

    def gather_nd(self, indices, name=None):
        self._materialise()
        return super().gather_nd(indices, name=name)

    def assign_add(self, delta, use_locking=None, name=None, read_value=True):
        self._materialise()
        return super().assign_add(delta, use_locking=use_locking, name=name, read_value=read_value)

    def assign_sub(self, delta, use_locking=None, name=None, read_value=True):
        self._materialise()
        return super().assign_sub(delta, use_locking=use_locking, name=name, read_value=read_value)


def _shape_and_dtype(kwargs):
    """A variable's shape and dtype from its creation arguments, without computing
    its initial value (a callable is traced in a scratch graph)."""
    value = kwargs.get("initial_value")
    dtype = kwargs.get("dtype")
    if callable(value):
        with tf.Graph().as_default():
            value = value()
    if not isinstance(value, (tf.Tensor, tf.Variable)):
        value = tf.convert_to_tensor(value, dtype=dtype)
    shape = kwargs.get("shape") or value.shape
    return tf.TensorShape(shape), tf.as_dtype(dtype or value.dtype)


def untouched_variables(python_fn, touched) -> list:
    """[name, shape] of each variable that the objects `python_fn` holds own but the
    step never touches (`touched`: the variables its trace captures), in creation order.
    The objects held: a bound method's `self` (fit's `model.train_step`: the model and
    its optimizer) and what its closure holds (a custom loop's model and optimizer),
    with every variable reachable from them as a checkpoint would reach it."""
    roots = [getattr(python_fn, "__self__", None)]
    for cell in getattr(python_fn, "__closure__", None) or ():
        try:
            roots.append(cell.cell_contents)
        except ValueError:                  # a cell not yet filled
            continue
    roots += [x for r in roots if isinstance(r, (tuple, list)) for x in r]
    roots += [x for r in roots if isinstance(r, dict) for x in r.values()]
    seen = {id(v.handle) for v in touched}
    untouched = {}
    for root in roots:
        if not isinstance(root, Trackable):
            continue
        for obj in tf.train.TrackableView(root).descendants():
            variable = obj if isinstance(obj, tf.Variable) else getattr(obj, "value", None)   # Keras' own
            if isinstance(variable, tf.Variable) and id(variable.handle) not in seen:
                seen.add(id(variable.handle))
                untouched[len(untouched)] = variable
    return [[v.name, v.shape.as_list()] for v in creation_order(untouched).values()]


def creation_order(variables: dict) -> dict:
    """{node: variable} ordered by when each variable was created (TF numbers every
    eager variable's handle from one process-wide counter)."""
    def uid(item):
        tail = item[1]._unique_id.rsplit("_", 1)[-1]
        return int(tail) if tail.isdigit() else -1
    return dict(sorted(variables.items(), key=uid))


class VariablePlan:
    """Devices of a placement's variables: name -> devices in creation order."""

    def __init__(self, placement_csv, others=None):
        self.path = str(placement_csv)
        devices = read_devices(placement_csv)
        self.by_name = {}
        profile = _profile(self.path)
        shapes = profile.get("variable_shapes") or {}
        for node, name in profile["variables"].items():
            if node not in devices:
                raise UserError(f"{self.path}: has no device for the variable node {node!r} "
                                f"({name}); placement.csv and profile.json are of different plans")
            self.by_name.setdefault(name, []).append((devices[node], shapes.get(node)))
        self.others = None if others is None else self._known(others)
        for name, shape in profile.get("untouched_variables") or []:     # after the touched ones of a name
            self.by_name.setdefault(name, []).append((self.others or UNTOUCHED_DEVICE, shape))
        self.used = {}

    def _known(self, device):
        local = local_device(device)
        if local not in known_devices():
            raise UserError(f"others: device {device!r} is not one of this process's devices "
                            f"({', '.join(sorted(known_devices()))})")
        return local

    def device(self, name: str):
        """(planned device, planned shape or None) of the next variable called `name`."""
        planned = self.by_name.get(name)
        if planned is None:
            if self.others is not None:
                return self.others, None
            near = difflib.get_close_matches(name, list(self.by_name), n=3, cutoff=0.4)
            raise UserError(f"{self.path}: variable {name!r} is not in the plan (nearest: "
                            f"{', '.join(near) or 'none'}); build the model as it was profiled, or "
                            f"give others=DEVICE for variables the step does not use")
        count = self.used.get(name, 0)
        if count >= len(planned):
            raise UserError(f"{self.path}: variable {name!r} created {count + 1} times, the plan "
                            f"has {len(planned)}; build the model once inside variables_placed "
                            f"(keras.backend.clear_session() resets Keras' layer names)")
        self.used[name] = count + 1
        return planned[count]


    def check_shape(self, name: str, variable, shape) -> None:
        """UserError if a variable's shape is not the planned one (a placement of
        another model whose variables happen to have the same names)."""
        if shape is not None and variable.shape.as_list() != shape:
            raise UserError(f"{self.path}: variable {name!r} has shape {variable.shape.as_list()}, the "
                            f"plan's has {shape}: a placement of another model; place a profile of "
                            f"this one")


def planned_variable_names(placement_csv) -> dict:
    """Variable node -> variable name from the profile.json next to placement_csv;
    {} if there is none (a placement of a TF1 graph, or copied alone)."""
    try:
        return _profile(placement_csv)["variables"]
    except UserError:
        return {}


def _profile(placement_csv) -> dict:
    """The profile.json next to placement_csv, with `variables` (node -> variable name)."""
    path = os.path.join(os.path.dirname(os.path.abspath(placement_csv)), "profile.json")
    try:
        with open(path) as f:
            doc = json.load(f)
        variables = doc.get("variables") if isinstance(doc, dict) else None
    except OSError as exc:
        raise UserError(f"{path}: cannot read ({exc.strerror}); variables_placed reads the "
                        f"profile.json `pardnn place` writes next to placement.csv") from None
    except ValueError as exc:
        raise UserError(f"{path}: not JSON ({exc})") from None
    if not isinstance(variables, dict):
        raise UserError(f"{path}: lists no variables; place a profile of a tf.function step "
                        f"(pardnn.tf.profile_function)")
    return doc


@contextlib.contextmanager
def variables_placed(placement_csv, others=None):
    """Variables created inside go to the devices placement_csv gives them."""
    plan = VariablePlan(placement_csv, others)

    def creator(next_creator, **kwargs):
        name = _full_name(kwargs.get("name"))
        device, shape = plan.device(name)
        with tf.device(device):
            variable = next_creator(**kwargs)
        plan.check_shape(name, variable, shape)
        return variable

    with tf.variable_creator_scope(creator):
        yield plan


def _full_name(name) -> str:
    """The name tf.Variable will give a variable created here: the current name
    scope, the name (default "Variable"), ":0"."""
    scope = tf.get_current_name_scope()
    name = name or "Variable"
    return f"{scope}/{name}:0" if scope else f"{name}:0"

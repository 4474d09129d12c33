"""A batch's specs: what `pardnn.keras.plan` traces the step with, and keeps in plan.json.

`batch_spec` is one batch as the step takes it: for `fit`, what `train_step(data)`
gets, `(x, y)` or `(x, y, sample_weight)` (x a tensor, a list or a dict of them, as
the model's inputs are); for a custom step `fn(*built, *batch)`, the tuple of its
batch arguments, x first. Each leaf is a tf.TensorSpec, a tensor or an array (only
its shape and dtype are used) with every dimension known: the plan costs one step
of that batch.
"""

from __future__ import annotations

import re

import keras
import numpy as np
import tensorflow as tf

from pardnn.base.errors import UserError


def to_specs(batch_spec):
    """batch_spec with every leaf a fully known tf.TensorSpec; UserError naming a
    leaf that is not one, or whose shape is not fully known."""
    def spec(leaf):
        if isinstance(leaf, tf.TensorSpec):
            out = leaf
        elif isinstance(leaf, (tf.Tensor, np.ndarray, np.generic)):
            out = tf.TensorSpec(leaf.shape, tf.as_dtype(leaf.dtype))
        else:
            raise UserError(f"batch_spec: {type(leaf).__name__} {leaf!r:.40} is not a tf.TensorSpec, tensor or "
                            f"array (give one batch: (x, y) for fit, the step's batch arguments else)")
        if not out.shape.is_fully_defined():
            raise UserError(f"batch_spec: a spec of shape {out.shape.as_list()} is not fully known; give the "
                            f"batch size and every dimension (the plan costs one step of that batch)")
        return out
    if batch_spec is None:
        raise UserError("batch_spec: None; give one batch: (x, y) for fit, the step's batch arguments else")
    return tf.nest.map_structure(spec, batch_spec)


def model_input(batch, fit: bool):
    """The part of a batch the model takes: x of fit's (x, y, sample_weight), the
    first argument of a custom step's."""
    if fit:
        return keras.utils.unpack_x_y_sample_weight(batch)[0]
    return batch[0] if isinstance(batch, (tuple, list)) and batch else batch


def samples(x) -> int:
    """The samples of model input `x` (specs or tensors): its first leaf's first
    dimension, 1 for a scalar."""
    leaves = [leaf for leaf in tf.nest.flatten(x) if leaf is not None]
    return int(leaves[0].shape[0]) if leaves and leaves[0].shape.rank else 1


def check_inputs(model, x) -> None:
    """UserError naming the input when `x` (specs) does not match a functional
    model's inputs: another structure, an input missing or unknown, another shape.
    A subclassed model declares no inputs: its step's trace says what it takes."""
    inputs = getattr(model, "inputs", None) if getattr(model, "_inputs_struct", None) is not None else None
    if not inputs:
        return
    struct = model._inputs_struct
    named = sorted(struct.items()) if isinstance(struct, dict) else [(_input_name(t), t) for t in inputs]
    wanted = [name for name, _ in named]
    if isinstance(x, dict):
        for name in wanted:
            if name not in x:
                raise UserError(f"batch_spec: has no input {name!r} (the model's inputs: {', '.join(wanted)})")
        for name in x:
            if name not in wanted:
                raise UserError(f"batch_spec: input {name!r} is not one of the model's ({', '.join(wanted)})")
        pairs = [(name, x[name], tensor) for name, tensor in named]
    else:
        flat = tf.nest.flatten(x)
        if len(flat) != len(named):
            raise UserError(f"batch_spec: gives {len(flat)} model input(s), the model takes {len(named)} "
                            f"({', '.join(wanted)})")
        pairs = [(name, spec, tensor) for (name, tensor), spec in zip(named, flat)]
    for name, spec, tensor in pairs:
        want, have = list(tensor.shape), spec.shape.as_list()
        if len(want) != len(have) or any(w is not None and w != h for w, h in zip(want, have)):
            raise UserError(f"batch_spec: input {name!r} has shape {have}, the model's takes "
                            f"{[w if w is not None else 'None' for w in want]}".replace("'None'", "None"))


def _input_name(tensor) -> str:
    history = getattr(tensor, "_keras_history", None)
    return getattr(getattr(history, "operation", None), "name", None) or tensor.name


def trace_error(exc) -> str:
    """The line of a Keras or TF tracing error that says what is wrong: the last
    `SomeError: ...` line of an AutoGraph error, else its first line of substance."""
    lines = [re.sub(r"\x1b\[[0-9;]*m", "", line).strip() for line in str(exc).splitlines()]
    raised = [m.group(1) for m in (re.match(r"^\w*(?:Error|Exception): (.+)$", line) for line in lines) if m]
    if raised:
        return raised[-1]
    useful = [line for line in lines if line and not line.startswith(("Exception encountered", "Arguments received",
                                                                      "•", "in user code", "File "))]
    return useful[0] if useful else type(exc).__name__


def to_json(specs):
    """Specs as plan.json keeps them: {"shape": [...], "dtype": "float32"} leaves, in
    lists (tuples too) and dicts."""
    if isinstance(specs, tf.TensorSpec):
        return {"shape": specs.shape.as_list(), "dtype": specs.dtype.name}
    if isinstance(specs, dict):
        return {"dict": {str(k): to_json(v) for k, v in specs.items()}}
    if isinstance(specs, (list, tuple)):
        return {"tuple" if isinstance(specs, tuple) else "list": [to_json(v) for v in specs]}
    raise TypeError(f"not a spec structure: {specs!r}")


def from_json(doc, where):
    """The specs `to_json` wrote; UserError naming `where` when doc is not such."""
    try:
        if "shape" in doc:
            return tf.TensorSpec([int(d) for d in doc["shape"]], tf.as_dtype(doc["dtype"]))
        if "dict" in doc:
            return {k: from_json(v, where) for k, v in doc["dict"].items()}
        if "tuple" in doc:
            return tuple(from_json(v, where) for v in doc["tuple"])
        return [from_json(v, where) for v in doc["list"]]
    except (KeyError, TypeError, ValueError, AttributeError):
        raise UserError(f"{where}: batch_spec is not a spec structure pardnn.keras wrote") from None

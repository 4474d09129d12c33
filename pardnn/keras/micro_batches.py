"""Micro-batches: one training step run as M micro-batches with one update (issue 50).

A step on one batch has one critical path, and however many devices the plan has,
the step is no shorter than that path. Split into M micro-batches, the step holds M
independent forward and backward passes that the placement can run side by side on
different devices (GPipe, Huang et al. 2019; RaNNC and Piper pipeline the same way,
shared/papers 000, 003), and each pass holds 1/M of the activations.

How the step is split, for fit's `train_step` and for a custom step alike:

- The batch is cut along its first axis into M slices, as equal as they can be (the
  first `b % M` slices one sample larger); a batch of fewer than M samples is an
  error at run time (fit's last, partial batch included: see docs/tf2.md).
- The step is called once per slice, in one tf.function. Its optimizer update is
  caught (each optimizer's `apply`, which `apply_gradients` calls): nothing is
  applied during the M calls.
- The M gradients are combined, each weighted by its slice's share of the batch
  (n_i / b), and applied once: for a loss that is a mean over the batch's samples
  (Keras' losses are), the update is the full batch's, up to rounding, and the
  optimizer counts one step. A sparse gradient (tf.IndexedSlices, an embedding's)
  is combined by concatenating the weighted slices, as the full batch's would hold
  them.
- The step's result: fit's metrics are Keras' (their states were updated once per
  slice, weighted by its samples, so they equal the full batch's); a custom step's
  floating-point results are combined with the same weights, the others are the
  last slice's.
- Layers that couple the samples of a batch (BatchNormalization) see one slice at a
  time: per-micro-batch statistics, as in GPipe, and their moving averages are
  updated once per slice. `coupled_layers` names them; the plan's summary prints them.
"""

from __future__ import annotations

import contextlib

import keras
import tensorflow as tf

from pardnn.base.errors import UserError
from pardnn.keras.specs import samples

COUPLED = (keras.layers.BatchNormalization,)     # layers whose output depends on the other samples


def check_micro_batches(micro_batches, batch) -> int:
    """The micro-batch count, checked against the planned batch (its first leaf's first
    dimension): a UserError naming micro_batches and the batch when it is below 1, above
    the batch, or does not divide it."""
    if isinstance(micro_batches, bool) or not isinstance(micro_batches, int):
        raise UserError(f"micro_batches: give a whole number of micro-batches, or \"auto\"; got {micro_batches!r}")
    size = samples(batch)
    if not 1 <= micro_batches <= size or size % micro_batches:
        raise UserError(f"micro_batches: {micro_batches} micro-batches cannot split batch_spec's batch of {size} "
                        f"samples (give a divisor of {size} from 1 to {size})")
    return micro_batches


def coupled_layers(models) -> list:
    """Names of the layers of `models` that couple a batch's samples (COUPLED)."""
    found, seen = [], set()

    def walk(layer):
        if id(layer) in seen:
            return
        seen.add(id(layer))
        if isinstance(layer, COUPLED):
            found.append(layer.name)
        for child in getattr(layer, "_layers", None) or []:
            walk(child)
    for model in models:
        walk(model)
    return found


def micro_batch_line(micro_batches: int, coupled) -> str:
    """The plan summary's line on its micro-batches, naming the layers they change."""
    line = f"micro-batches: {micro_batches} per step, one update"
    if coupled:
        shown = ", ".join(coupled[:8]) + (f" and {len(coupled) - 8} more" if len(coupled) > 8 else "")
        line += f"; per-micro-batch statistics in {len(coupled)} BatchNormalization layer(s): {shown}"
    return line


def micro_batched(python_fn, optimizers, micro_batches: int, name: str, fit: bool = False):
    """A Python step `fn(*batch)` that runs `python_fn(*batch)` as `micro_batches`
    micro-batches with one optimizer update (module docstring). `name` names the step
    in errors; `fit`: python_fn is Keras' train_step, whose result (the metrics) is
    the last slice's."""
    def step(*batch):
        weights, slices = _split(batch, micro_batches)
        results = []
        with _caught(optimizers) as calls:
            for i in range(micro_batches):
                with tf.name_scope(f"micro_batch_{i}"):
                    results.append(python_fn(*[s[i] for s in slices]))
        _apply(calls, weights, micro_batches, name)
        return results[-1] if fit else _combined(results, weights)
    step.__name__ = step.__qualname__ = getattr(python_fn, "__name__", "step")
    return step


def _split(batch, m: int):
    """(weights, slices): each slice's share n_i / b of the batch (float32 tensors), and
    per batch argument its M slices along the first axis (same structure as the argument)."""
    leaves = [leaf for leaf in tf.nest.flatten(batch) if leaf is not None]
    b = tf.shape(leaves[0])[0]
    tf.debugging.assert_greater_equal(b, m, message=f"pardnn: a batch of fewer samples than its {m} micro-batches")
    sizes = tf.stack([b // m + tf.cast(i < b % m, b.dtype) for i in range(m)])
    weights = [tf.cast(sizes[i], tf.float32) / tf.cast(b, tf.float32) for i in range(m)]

    def cut(leaf):
        if not isinstance(leaf, (tf.Tensor, tf.Variable)) or leaf.shape.rank == 0:
            return [leaf] * m                   # None, a Python value, a scalar: every slice's
        return tf.split(leaf, sizes, num=m, axis=0)
    slices = []
    for argument in batch:
        cuts = [cut(leaf) for leaf in tf.nest.flatten(argument)]
        slices.append([tf.nest.pack_sequence_as(argument, [c[i] for c in cuts]) for i in range(m)])
    return weights, slices


@contextlib.contextmanager
def _caught(optimizers):
    """While inside, each optimizer's `apply(grads, variables)` records its call instead
    of applying it; yields [(optimizer, its calls: [(grads, variables), ...])]."""
    caught = [(optimizer, []) for optimizer in optimizers]

    def catcher(calls):
        def apply(grads, trainable_variables=None):
            calls.append((list(grads), trainable_variables))
        return apply
    for optimizer, calls in caught:
        optimizer.apply = catcher(calls)
    try:
        yield caught
    finally:
        for optimizer, _ in caught:
            del optimizer.apply


def _apply(caught, weights, m, name):
    """Each optimizer's M caught updates combined (weighted) and applied once."""
    if not any(calls for _, calls in caught):
        raise UserError(f"micro_batches: the step {name!r} applied no gradients through a Keras optimizer "
                        f"(optimizer.apply or apply_gradients); pardnn cannot split a step it cannot see update")
    for optimizer, calls in caught:
        if not calls:
            continue
        variables = calls[0][1]
        if len(calls) != m or any(_ids(v) != _ids(variables) for _, v in calls):
            raise UserError(f"micro_batches: the step {name!r} updated through its optimizer {len(calls)} times "
                            f"for {m} micro-batches, or other variables each time; one update per step is needed")
        grads = [_weighted_sum([g[j] for g, _ in calls], weights) for j in range(len(calls[0][0]))]
        optimizer.apply(grads, variables)


def _ids(variables):
    return None if variables is None else [id(v) for v in variables]


def _weighted_sum(grads, weights):
    """sum_i w_i g_i of one variable's M gradients: None when every one is None, a
    tf.IndexedSlices of the weighted slices concatenated when they are sparse."""
    if all(g is None for g in grads):
        return None
    if any(g is None for g in grads):
        raise UserError("micro_batches: a variable has a gradient in some micro-batches and none in others")
    if all(isinstance(g, tf.IndexedSlices) for g in grads):
        return tf.IndexedSlices(
            tf.concat([g.values * tf.cast(w, g.values.dtype) for g, w in zip(grads, weights)], axis=0),
            tf.concat([g.indices for g in grads], axis=0), grads[0].dense_shape)
    dense = [tf.convert_to_tensor(g) for g in grads]
    return tf.add_n([g * tf.cast(w, g.dtype) for g, w in zip(dense, weights)])


def _combined(results, weights):
    """A custom step's result: floating-point tensors weighted over the slices, the
    rest the last slice's."""
    def combine(*values):
        last = values[-1]
        if isinstance(last, tf.Tensor) and last.dtype.is_floating:
            return tf.add_n([v * tf.cast(w, v.dtype) for v, w in zip(values, weights)])
        return last
    return tf.nest.map_structure(combine, *results)


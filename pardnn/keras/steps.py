"""What a build returned, and the training step a plan profiles and places.

A plan for `model.fit` (no `step=`): build returns a compiled keras.Model, and the
step is its `train_step(data)`. A plan for a custom loop: build returns the model,
or a tuple holding it (`(model, optimizer)`), and `step(*built, *batch)` is one
training step (a Python function or a tf.function; it is traced as tf.function
traces it). Before a step is profiled or placed it is traced once (`warm_up`), as
Keras' first step would: what Keras builds lazily then (the optimizer's slots, the
compiled metrics' state) is created by the plan's creator, shape-only when
planning, on the planned devices when training.
"""

from __future__ import annotations

import keras
import tensorflow as tf

from pardnn.base.errors import UserError
from pardnn.keras.micro_batches import micro_batched
from pardnn.keras.specs import trace_error
from pardnn.tf.function import relaxed_batch


def split_built(built, step, where="build"):
    """(models, optimizers) of what build returned; UserError when it holds no Keras
    model, or, for fit (no step), no compiled model alone."""
    items = list(built) if isinstance(built, (tuple, list)) else [built]
    models = [x for x in items if isinstance(x, keras.Model)]
    optimizers = [x for x in items if isinstance(x, keras.optimizers.Optimizer)]
    if not models:
        raise UserError(f"{where}: returned {_shown(built)}, no keras.Model; return the compiled model (for "
                        f"fit), or the model and its optimizer with step= (a custom training step)")
    if step is None:
        if len(items) != 1 or isinstance(built, (tuple, list)):
            raise UserError(f"{where}: returned {_shown(built)}; a plan for model.fit takes the compiled model "
                            f"alone (give step=FN to plan a custom training step fn(*built, *batch))")
        if not getattr(models[0], "compiled", False):
            raise UserError(f"{where}: model {models[0].name!r} is not compiled; compile it in build (a plan "
                            f"for model.fit), or give step=FN to plan a custom training step")
    return models, optimizers


def _shown(value) -> str:
    if isinstance(value, (tuple, list)):
        return f"a {type(value).__name__} of {', '.join(type(x).__name__ for x in value) or 'nothing'}"
    name = type(value).__name__
    return "None" if value is None else f"{'an' if name[0].lower() in 'aeiou' else 'a'} {name}"


def training_step(built, step, batch, micro_batches: int = 1):
    """(a fresh tf.function, its arguments): fit's `model.train_step(batch)`, or
    `step(*built, *batch)` (batch: the tuple of the step's batch arguments). Its input
    signature leaves the batch dimension unknown (pardnn.tf.function.relaxed_batch), as
    the placed step's trace does for any batch size; the profile still costs `batch`.
    With micro_batches > 1 the step runs as that many micro-batches with one update
    (pardnn.keras.micro_batches)."""
    if step is None:
        fn, name, args, optimizers = built.train_step, "train_step", (batch,), [built.optimizer]
    else:
        python_fn = step.python_function if isinstance(step, tf.types.experimental.PolymorphicFunction) else step
        bound = tuple(built) if isinstance(built, (tuple, list)) else (built,)

        def fn(*batch_args):
            return python_fn(*bound, *batch_args)
        name = getattr(python_fn, "__name__", "step")
        fn.__name__ = fn.__qualname__ = name
        args, optimizers = tuple(batch), split_built(built, step)[1]
    if micro_batches > 1:
        fn = micro_batched(fn, optimizers, micro_batches, name, fit=step is None)
    return tf.function(fn, input_signature=[relaxed_batch(b) for b in args]), args


def warm_up(step_fn, args) -> None:
    """Trace step_fn with args once (nothing runs); a batch the step cannot take is a
    UserError naming batch_spec."""
    try:
        step_fn.get_concrete_function(*args)
    except UserError as exc:
        raise UserError(own_message(exc)) from None
    except (TypeError, ValueError) as exc:
        raise UserError(f"batch_spec: the step cannot be traced with it ({trace_error(exc)})") from None


def own_message(exc) -> str:
    """A UserError's own line: tf.function's trace prefixes the error of a traced step
    with the step's traceback ("in user code: ..."), which the one-line rule drops."""
    text = str(exc)
    if "in user code:" not in text:
        return text
    lines = [line.strip() for line in text.splitlines() if line.strip().startswith("UserError: ")]
    return lines[-1][len("UserError: "):] if lines else text.splitlines()[-1].strip()

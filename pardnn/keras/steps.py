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

import os
import sysconfig
import traceback

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
    step_fn = tf.function(fn, input_signature=[relaxed_batch(b) for b in args])
    step_fn.pardnn_step = (f"step: {name}" if step is not None
                           else f"build: the train_step of model {built.name!r}")    # what warm_up's errors name
    return step_fn, args


def warm_up(step_fn, args) -> None:
    """Trace step_fn with args once (nothing runs). A TypeError or ValueError is a
    UserError: one naming the step and the line of the user's code where it failed
    (`user_frame`), else, when no code of the user's is on the way (Keras' own step
    refused the batch), one naming batch_spec."""
    try:
        step_fn.get_concrete_function(*args)
    except UserError as exc:
        raise UserError(own_message(exc)) from None
    except (TypeError, ValueError) as exc:
        frame = user_frame(exc)
        if frame is None:
            raise UserError(f"batch_spec: the step cannot be traced with it ({trace_error(exc)})") from None
        what = getattr(step_fn, "pardnn_step", f"step: {getattr(step_fn, '__name__', 'step')}")
        code = f" ({frame.line.strip()})" if frame.line and frame.line.strip() else ""
        raise UserError(f"{what} fails at {_shown_path(frame.filename)}:{frame.lineno} in {frame.name}{code}: "
                        f"{trace_error(exc)}") from None


def user_frame(exc):
    """The innermost frame of `exc`'s traceback in the user's code (a
    traceback.FrameSummary), None if none: not in TensorFlow, Keras, pardnn or Python's
    standard library. An error raised while AutoGraph traced converted code carries
    its frames mapped back to the user's source (`ag_error_metadata`); else the
    traceback's own frames are read, AutoGraph's generated files skipped."""
    stack = getattr(getattr(exc, "ag_error_metadata", None), "translated_stack", None)
    if stack:                                     # innermost first
        frames = [traceback.FrameSummary(f.filename, f.lineno, f.function_name, lookup_line=False, line=f.code)
                  for f in stack]
    else:
        frames = list(reversed(traceback.extract_tb(exc.__traceback__)))
    libraries = _library_dirs()
    for frame in frames:
        path = os.path.abspath(frame.filename) if not frame.filename.startswith("<") else frame.filename
        if "__autograph_generated_file" in path or any(_under(path, d) for d in libraries):
            continue
        if _under(path, sysconfig.get_paths()["stdlib"]) and not _under(path, sysconfig.get_paths()["purelib"]):
            continue
        return frame
    return None


def _library_dirs() -> list:
    """The folders of the packages whose frames are not the user's code: TensorFlow's,
    Keras' and pardnn's (the folder above this package)."""
    pardnn_dir = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return [os.path.dirname(os.path.abspath(module.__file__)) for module in (tf, keras)] + [pardnn_dir]


def _under(path: str, folder: str) -> bool:
    return path.startswith(os.path.join(os.path.abspath(folder), ""))


def _shown_path(path: str) -> str:
    """`path` relative to the working directory when it lies below it."""
    if path.startswith("<"):
        return path
    relative = os.path.relpath(path)
    return path if relative.startswith("..") else relative


def own_message(exc) -> str:
    """A UserError's own line: tf.function's trace prefixes the error of a traced step
    with the step's traceback ("in user code: ..."), which the one-line rule drops."""
    text = str(exc)
    if "in user code:" not in text:
        return text
    lines = [line.strip() for line in text.splitlines() if line.strip().startswith("UserError: ")]
    return lines[-1][len("UserError: "):] if lines else text.splitlines()[-1].strip()

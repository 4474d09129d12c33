"""The `build(**knobs)` protocol every model script follows.

A model module (a built-in family in pardnn_builtin_models, or a user's script given as
`pardnn profile path/to/script.py`) defines:

    DESCRIPTION = "one line"
    KNOBS = {"layers": 2, "hidden": 64, "batch": 8, "seed": 0, ...}   # defaults
    SIZES = {"tiny": {...}, "thesis": {...}}          # named configs (optional)
    def build(**knobs) -> Model

Knob types are taken from the defaults: `--set layers=4` is parsed as an int
because KNOBS["layers"] is one. `build` returns a `Model` naming the ops to run, so
the same description drives the original graph and its placed copy.

The built-in families are the scripts of the top-level package
`pardnn_builtin_models`, which also finds a family or a user's script by name
(`load_module`); they read like a user's script. layers.py holds the layers they
share; a user's script may use it too.
"""

from __future__ import annotations

import contextlib
import importlib.util
import inspect
import os
import sys
from dataclasses import dataclass, field
from typing import Callable

from pardnn.base.errors import UserError

__all__ = ["Model", "build_model", "resolve_knobs", "script_errors"]

USER_MODULE = "pardnn_user_model"     # the name a user's script is loaded under
MAX_TRACED_STEPS = 1_000    # a profile's traced steps (a handful give the medians)
MAX_RUN_STEPS = 100_000     # `pardnn run`'s steps: it checks a placement, it is no trainer

@dataclass
class Model:
    """A TF1-style training graph and the names needed to train it.

    graph: the tf.Graph; train_op: op to run once per step; loss: tensor name
    (e.g. "loss:0"); init: op that initialises the variables; feed: step -> dict
    from placeholder tensor name to numpy array (None when the graph makes its own
    data); seed: the graph-level seed used."""

    graph: object
    train_op: str
    loss: str
    init: str
    feed: Callable[[int], dict] | None = None
    seed: int = 0
    extra: dict = field(default_factory=dict)


def resolve_knobs(module, size: str | None = None, settings=()) -> dict:
    """Defaults, then the named size, then `key=value` settings, type-checked."""
    knobs = dict(getattr(module, "KNOBS", {}))
    sizes = getattr(module, "SIZES", {})
    if size is not None:
        if size not in sizes:
            raise UserError(f"--size: unknown size {size!r} (choose from {', '.join(sizes) or 'none'})")
        knobs.update(sizes[size])
    for item in settings:
        key, sep, text = item.partition("=")
        if not sep:
            raise UserError(f"--set: expected key=value, got {item!r}")
        if key not in knobs:
            raise UserError(f"--set: unknown knob {key!r} (choose from {', '.join(knobs)})")
        knobs[key] = _convert(key, text, knobs[key])
    return knobs


def _convert(key, text, default):
    kind = type(default)
    try:
        if kind is bool:
            if text.lower() not in ("true", "false", "1", "0"):
                raise ValueError(text)
            return text.lower() in ("true", "1")
        return kind(text)
    except ValueError:
        raise UserError(f"--set: knob {key!r} takes {kind.__name__}, got {text!r}") from None


def build_model(module, name, knobs) -> Model:
    """module.build(**knobs) checked: a user script's exception, or anything but a
    Model returned, becomes a one-line UserError naming the script."""
    if not isinstance(knobs, dict):
        raise UserError(f"MODEL: {name}: knobs must be a mapping of name to value, got {knobs!r}")
    with script_errors(module, name, "build() failed"):
        model = module.build(**knobs)
    if not isinstance(model, Model):
        raise UserError(f"MODEL: {name}: build() returned {type(model).__name__}, not a pardnn.models.Model")
    if model.feed is not None and not _takes_one_argument(model.feed):
        raise UserError(f"MODEL: {name}: the Model's feed must be None or a function step -> feed dict, "
                        f"not {model.feed!r:.60}")
    return model


def _takes_one_argument(fn) -> bool:
    if not callable(fn):
        return False
    try:
        inspect.signature(fn).bind(0)
    except TypeError:
        return False
    except ValueError:          # a builtin without a signature: let the call say
        return True
    return True


@contextlib.contextmanager
def script_errors(module, name, what="its step failed to run"):
    """Turns an exception raised while running a user's script (its build(), or its
    graph in a session: a missing feed, a bad train_op name, a failed check) into a
    one-line UserError naming the script, with the line that says what went wrong.
    One raised by pardnn's own code, or by a built-in model, is pardnn's bug and
    stays a traceback."""
    try:
        yield
    except UserError:
        raise
    except Exception as exc:
        if module.__name__ != USER_MODULE or _raised_in_pardnn(exc):
            raise
        raise UserError(f"MODEL: {name}: {what} ({type(exc).__name__}: {_gist(exc)})") from None


def _raised_in_pardnn(exc) -> bool:
    """Whether pardnn's own code raised `exc`: of the frames in pardnn's package or in
    the user's script, the innermost is pardnn's, and the error came from pardnn's code
    or a library it called (Python's or an installed package's), not from TensorFlow
    (refusing the script's graph or feeds, which pardnn runs) nor from other code of
    the user's (a feed function in a module of theirs)."""
    deepest, innermost, raw = None, "", ""
    tb = exc.__traceback__
    while tb is not None:
        raw = tb.tb_frame.f_code.co_filename
        innermost = os.path.abspath(raw)
        if innermost.startswith(_PACKAGE + os.sep) or tb.tb_frame.f_globals.get("__name__") == USER_MODULE:
            deepest = innermost
        tb = tb.tb_next
    if deepest is None or not deepest.startswith(_PACKAGE + os.sep):
        return False
    libraries = {os.path.abspath(p) + os.sep for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
    from_library = innermost.startswith(tuple(libraries)) or raw.startswith("<")     # (<frozen os>)
    from_tensorflow = innermost.startswith(tuple(where + os.sep for where in _tensorflow()))
    return (innermost.startswith(_PACKAGE + os.sep) or from_library) and not from_tensorflow


_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _tensorflow() -> list:
    """TensorFlow's package folders, found without importing it (this module imports no TF)."""
    spec = importlib.util.find_spec("tensorflow")
    return [os.path.abspath(p) for p in (spec.submodule_search_locations or [])] if spec else []


def _gist(exc) -> str:
    """The first line of the message, or for TF's "Graph execution error" the node
    and the line after "Node: 'x'"."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    for at, line in enumerate(lines[:-1]):
        if line.startswith("Node: "):
            return f"at node {line[6:]}: {lines[at + 1]}"
    if lines and lines[0].startswith("Graph execution error"):
        told = [x for x in lines[1:] if not x.startswith(("Detected at node", "File ", "[["))]
        return told[0] if told else lines[0]
    return lines[0] if lines else ""

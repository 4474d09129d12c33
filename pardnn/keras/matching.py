"""Each variable of a build on the device the plan gives it.

While `plan.scope()` runs the user's build, the model does not exist yet (a
functional model's layers build before `keras.Model(...)` is called), so a variable
cannot be known by its key (pardnn.keras.keys) when it is created. The same code
creates the same variables in the same order, whatever Keras names them, so the
variable created n-th in the scope is created on the device of the plan's n-th
variable, and must have its shape and dtype. Once the model is
whole (the scope's end for `fit`, `plan.step` for a custom loop), every variable's
key must be the plan's key for it, and the layers the plan's layers. Anything else
is a UserError naming the variable or layer, raised before any step runs.
"""

from __future__ import annotations

import sys
import weakref
from typing import NamedTuple

import keras
import tensorflow as tf

from pardnn.base.errors import UserError
from pardnn.keras.keys import layer_summary, variable_keys
from pardnn.keras.names import global_state      # Keras 3's (pardnn.keras.names checks it is)

AGAIN = "plan it again (pardnn.keras.plan)"


class PlannedVariable(NamedTuple):
    """A variable of the plan, in creation order."""

    key: str            # pardnn.keras.keys: layer path + name in the layer
    name: str           # its TF name when planned (Keras' names: for messages only)
    short: str          # the name it was created with (`kernel`)
    shape: list
    dtype: str
    device: str         # where it is created


class Created(NamedTuple):
    variable: object
    short: str
    owner: str          # the Keras layer, optimizer or metric creating it, for messages


def created_key(i, short) -> str:
    """The key of a variable no model or optimizer holds (created n-th in the build)."""
    return f"created[{i}]/{short}"


def keys_of(created, models, optimizers) -> list:
    """The key of each created variable (pardnn.keras.keys), in creation order."""
    keys = variable_keys(models, optimizers)
    return [keys.get(id(c.variable)) or created_key(i, c.short) for i, c in enumerate(created)]


def owner_now() -> str:
    """The Keras object whose name scope is innermost, for messages: `layer 'dense_3' (Dense)`."""
    stack = global_state.get_global_attribute("name_scope_stack") or []
    for scope in reversed(stack):
        if scope.caller is not None:
            kind = "layer" if isinstance(scope.caller, keras.layers.Layer) else "object"
            return f"{kind} {getattr(scope.caller, 'name', '?')!r} ({type(scope.caller).__name__})"
    return "no Keras layer"


class Matcher:
    """A variable creator (`with tf.variable_creator_scope(matcher.creator)`) placing
    each variable as the plan's variable created at the same point (module docstring);
    it notes the Keras models whose methods create variables, to find the model built."""

    def __init__(self, where: str, planned: list):
        self.where, self.planned = where, planned
        self.created = []
        self.error = None           # the UserError the creator raised (Keras may re-raise it reworded)
        self._models = []

    def creator(self, next_creator, **kwargs):
        i, short = len(self.created), kwargs.get("name") or "Variable"
        owner = owner_now()
        if i >= len(self.planned):
            self._refuse(f"{self.where}: variable {short!r} of {owner} is not in the plan, which has "
                            f"{len(self.planned)} variables: the model built is not the planned one "
                            f"(a layer added?); {AGAIN}")
        want = self.planned[i]
        with tf.device(want.device):
            variable = next_creator(**kwargs)
        have = (variable.shape.as_list(), variable.dtype.name)
        if have != (want.shape, want.dtype):
            self._refuse(f"{self.where}: variable {variable.name.split(':')[0]!r} of {owner} has shape "
                         f"{have[0]} {have[1]}; the plan's variable created there, {want.key!r}, has "
                         f"{want.shape} {want.dtype}: the model built is not the planned one; {AGAIN}")
        self.created.append(Created(variable, short, owner))
        self._note_models()
        return variable

    def _refuse(self, message):
        self.error = UserError(message)
        raise self.error

    def _note_models(self):
        """Remember the Keras models on the call stack (`self` of a frame: Sequential's
        constructor, `compile`, `train_step`)."""
        frame = sys._getframe(2)
        while frame is not None:
            candidate = frame.f_locals.get("self")
            if isinstance(candidate, keras.Model) and all(m() is not candidate for m in self._models):
                self._models.append(weakref.ref(candidate))
            frame = frame.f_back

    def models(self) -> list:
        """The outermost Keras models noted: those no other noted model holds."""
        found = [m() for m in self._models if m() is not None]
        inner = {id(layer) for m in found for layer in m._flatten_layers(include_self=False)}
        return [m for m in found if id(m) not in inner]

    def check_layers(self, models, layers) -> None:
        """UserError unless `models` have the plan's layers (`layers`: [[path, class]]
        per model)."""
        for model, planned_layers in zip(models, layers):
            _check_layers(self.where, model, planned_layers)

    def check_variables(self, models, optimizers) -> None:
        """UserError unless every planned variable was created, each with the plan's key."""
        if len(self.created) < len(self.planned):
            want = self.planned[len(self.created)]
            raise UserError(f"{self.where}: the plan's variable {want.key!r} ({want.name}) was not created: "
                            f"the model built lacks it (a layer removed, or built outside the scope?); {AGAIN}")
        for c, key, want in zip(self.created, keys_of(self.created, models, optimizers), self.planned):
            if key != want.key:
                raise UserError(f"{self.where}: variable {c.variable.name.split(':')[0]!r} of {c.owner} is "
                                f"{key!r} in the model built, the plan's variable created there is "
                                f"{want.key!r}: the model built is not the planned one; {AGAIN}")


def _check_layers(where, model, planned) -> None:
    have = layer_summary(model)
    for (path, kind), want in zip(have, planned):
        if [path, kind] != list(want):
            raise UserError(f"{where}: layer {path} of the model built is a {kind}, the plan's is a "
                            f"{want[1]}: the model built is not the planned one; {AGAIN}")
    if len(have) != len(planned):
        extra = have[len(planned)] if len(have) > len(planned) else planned[len(have)]
        which = "is not in the plan" if len(have) > len(planned) else "of the plan was not built"
        raise UserError(f"{where}: layer {extra[0]} ({extra[1]}) {which}: the model built is not the "
                        f"planned one; {AGAIN}")


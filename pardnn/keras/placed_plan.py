"""A Keras plan: a folder pardnn.keras.plan wrote, and what trains as it says.

    plan = pardnn.keras.load_plan("pardnn_plan")       # or the Plan plan() returned
    with plan.scope():
        model = build()                   # every variable on its planned device
    model.fit(...)                        # the placed train_step, installed by the scope

    with plan.scope():                    # a custom loop
        model, optimizer = build()
    step = plan.step(train_step, model, optimizer)     # step(x, y): train_step(model, optimizer, x, y)

The scope checks the plan's devices first (a plan for devices this process lacks
is a UserError, nothing built), then creates each variable where the plan says
(pardnn.keras.matching) with Keras names counted from zero (pardnn.keras.names).
Leaving it (fit) or calling `plan.step` (a custom loop), it traces the step once,
as Keras' first step would: the optimizer's slots and the compiled metrics' state
are created then, on their planned devices. Then the model built must be the
planned one, variable for variable and layer for layer, and the step is placed
(pardnn.tf.placed, with every op on its planned device; fit's XLA compilation, which
Keras turns on by itself where there are GPUs, is turned off: XLA compiles a step
into one cluster on one device); no step has run yet.
"""

from __future__ import annotations

import contextlib
import json
import os

import tensorflow as tf

from pardnn.base.errors import UserError
from pardnn.keras.matching import Matcher
from pardnn.keras.names import KerasNames
from pardnn.keras.plan_file import PLAN_FILE, read_plan
from pardnn.keras.specs import from_json
from pardnn.keras.steps import split_built, training_step, warm_up
from pardnn.tf.function import placed
from pardnn.tf.plan_devices import known_devices, local_device, read_devices


def load_plan(directory) -> "Plan":
    """The plan pardnn.keras.plan wrote to `directory` (in this or another process)."""
    return Plan(directory, read_plan(directory))


class Plan:
    """A plan folder and how to train as it says (module docstring)."""

    def __init__(self, directory, doc):
        self.directory = str(directory)
        self.kind = doc["kind"]                          # "fit" or "step"
        self.devices = doc["devices"]
        self.micro_batches = int(doc.get("micro_batches", 1))      # pardnn.keras.micro_batches
        self.batch_spec = from_json(doc["batch_spec"], os.path.join(self.directory, PLAN_FILE))
        self._variables = doc["variables"]               # PlannedVariables, in creation order
        self._layers = doc["layers"]
        self._built = None                               # (Matcher, KerasNames) of the last scope

    def __repr__(self):
        return f"<pardnn.keras.Plan {self.directory!r}: {self.kind}, {len(self._variables)} variables on {self.devices}>"

    @property
    def placement_csv(self) -> str:
        return os.path.join(self.directory, "placement.csv")

    @property
    def report(self) -> dict:
        """report.json: what the placement costs (docs/report.md)."""
        with open(os.path.join(self.directory, "report.json")) as f:
            return json.load(f)

    def variable_devices(self) -> dict:
        """{variable key: device}, in creation order (pardnn.keras.keys)."""
        return {v.key: v.device for v in self._variables}

    @contextlib.contextmanager
    def scope(self):
        """Build the model inside: every variable where the plan says (module docstring)."""
        self._check_devices()
        matcher, names = Matcher("plan.scope()", self._variables), KerasNames()
        try:
            with names.active(), tf.variable_creator_scope(matcher.creator):
                yield self
                if self.kind == "fit":
                    self._install_fit(matcher, names)
        except Exception as exc:
            if matcher.error is not None and exc is not matcher.error:
                raise matcher.error from None      # Keras re-raised it with its call's arguments
            raise
        self._built = (matcher, names)

    def step(self, fn, *built):
        """The placed tf.function of a custom training step: `step(*batch)` runs
        `fn(*built, *batch)` (built: what build returned in the scope) with every op
        on its planned device."""
        if self.kind != "step":
            raise UserError("plan.step: this plan is for model.fit (plan() got no step=); the scope installed "
                            "the placed train_step: call model.fit")
        if self._built is None:
            raise UserError("plan.step: build the model inside `with plan.scope():` first")
        matcher, names = self._built
        models, optimizers = split_built(built, fn, "plan.step")
        matcher.check_layers(models, self._layers)
        warm_fn, args = training_step(built, fn, self.batch_spec, self.micro_batches)
        with self._tracing(matcher, names):
            warm_up(warm_fn, args)
        matcher.check_variables(models, optimizers)
        step_fn, _ = training_step(built, fn, self.batch_spec, self.micro_batches)
        return placed(step_fn, self.placement_csv, relax_batch=True,
                      around=lambda: self._tracing(matcher, names))

    def _install_fit(self, matcher, names):
        """The compiled model built in the scope: its lazily built state created, checked
        against the plan, its train_step placed."""
        models = [m for m in matcher.models() if getattr(m, "compiled", False)]
        if len(models) != 1:
            raise UserError(f"plan.scope(): {'no' if not models else len(models)} compiled Keras models were "
                            f"built inside; build and compile the planned model there, once")
        model = models[0]
        matcher.check_layers([model], self._layers)
        step_fn, args = training_step(model, None, self.batch_spec, self.micro_batches)
        warm_up(step_fn, args)
        matcher.check_variables([model], [])
        model.train_step = placed(step_fn, self.placement_csv, relax_batch=True,
                                  around=lambda: self._tracing(matcher, names))
        for kind in ("test_step", "predict_step"):      # evaluate, predict: their ops follow the plan
            setattr(model, kind, placed(tf.function(getattr(model, kind)), self.placement_csv, relax_batch=True,
                                        around=lambda: self._tracing(matcher, names), follow=True))
        model.jit_compile = False       # XLA would compile fit's step as one cluster, on one device

    @staticmethod
    @contextlib.contextmanager
    def _tracing(matcher, names):
        """What a trace of the step runs inside: the build's Keras names, the plan's creator."""
        with names.active(), tf.variable_creator_scope(matcher.creator):
            yield

    def _check_devices(self):
        """UserError naming a device of the plan this process lacks (nothing built yet)."""
        read_devices(self.placement_csv)
        known = known_devices()
        for v in self._variables:
            if local_device(v.device) not in known:
                raise UserError(f"{self.directory}: variable {v.key!r} is planned on {v.device}, not one of this "
                                f"process's devices ({', '.join(sorted(known))})")

"""Keras in three lines: plan a model, build it placed, train it (docs/tf2.md).

    plan = pardnn.keras.plan(build, batch_spec, devices="dgx-h100", memory="auto")
    with plan.scope():
        model = build()                   # every variable on its planned device
    model.fit(dataset, epochs=3)          # the placed train_step

    plan = pardnn.keras.load_plan("pardnn_plan")      # the same plan, another process
    step = plan.step(train_step, model, optimizer)     # a custom training loop

`plan` profiles the model shape-only with estimated costs and places it in-process,
writing the folder `pardnn place` writes (`pardnn emulate`, TensorBoard and the trace
viewers read it). The API underneath is pardnn.tf's (profile_function, placed).
TensorFlow and Keras are imported on first use of this API, not by importing the
package.
"""

import importlib

# Public name -> the module defining it (imported by name on first use; tests/test_layout.py
# reads these strings as imports).
_API = {"plan": "pardnn.keras.planning", "load_plan": "pardnn.keras.placed_plan",
        "Plan": "pardnn.keras.placed_plan"}
__all__ = sorted(_API)


def __getattr__(name):
    if name not in _API:
        raise AttributeError(f"module 'pardnn.keras' has no attribute {name!r}")
    return getattr(importlib.import_module(_API[name]), name)

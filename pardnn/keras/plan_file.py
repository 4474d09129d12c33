"""plan.json: what a Keras plan adds to the `pardnn place` folder it writes.

    {"pardnn_keras_plan": 1, "kind": "fit" | "step", "step": "train_step",
     "devices": "cpu:8", "memory": "auto", "memory_bytes": [...], "reserve": 0.1,
     "algorithm": "pardnn", "estimate": "dgx-h100",
     "batch_spec": {"tuple": [{"shape": [16, 64], "dtype": "float32"}, ...]},
     "layers": [[[path, class], ...] per model],
     "variables": [{"key", "name", "short", "shape", "dtype", "device", "node"}, ...],
     "tensorflow": "2.21.0", "keras": "3.15.1"}

`variables` are in the order the build creates them (pardnn.keras.matching); `node`
is the variable's node in profile/graph.pb (null for a variable the step never
touches), `device` where it is created.
"""

from __future__ import annotations

import json
import os

from pardnn.base.errors import UserError
from pardnn.keras.matching import PlannedVariable

PLAN_FILE = "plan.json"
FORMAT = 1
KINDS = ("fit", "step")


def read_plan(directory) -> dict:
    """plan.json of `directory`, checked; its `variables` as PlannedVariables."""
    path = os.path.join(str(directory), PLAN_FILE)
    if not os.path.isdir(str(directory)):
        raise UserError(f"directory: {directory} is not a folder (a plan is the folder pardnn.keras.plan writes)")
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except OSError as exc:
        raise UserError(f"{path}: cannot read ({exc.strerror}); a plan is the folder pardnn.keras.plan "
                        f"writes") from None
    except ValueError as exc:
        raise UserError(f"{path}: not JSON ({exc})") from None
    if not isinstance(doc, dict) or doc.get("pardnn_keras_plan") != FORMAT or doc.get("kind") not in KINDS:
        raise UserError(f"{path}: not a plan pardnn.keras wrote (format {FORMAT})")
    doc["variables"] = [_variable(path, i, v) for i, v in enumerate(_list(path, doc, "variables"))]
    for model in _list(path, doc, "layers"):
        if not isinstance(model, list) or not all(_is_pair(layer) for layer in model):
            raise UserError(f"{path}: layers: expected a list of [path, class] per model")
    return doc


def _variable(path, i, entry) -> PlannedVariable:
    try:
        shape = [int(d) for d in entry["shape"]]
        fields = [entry[k] for k in ("key", "name", "short", "dtype", "device")]
    except (KeyError, TypeError, ValueError):
        raise UserError(f"{path}: variables[{i}]: expected key, name, short, shape, dtype and device") from None
    if not all(isinstance(f, str) for f in fields):
        raise UserError(f"{path}: variables[{i}]: key, name, short, dtype and device must be text")
    key, name, short, dtype, device = fields
    return PlannedVariable(key, name, short, shape, dtype, device)


def _list(path, doc, field) -> list:
    value = doc.get(field)
    if not isinstance(value, list):
        raise UserError(f"{path}: {field}: expected a list")
    return value


def _is_pair(layer) -> bool:
    return isinstance(layer, list) and len(layer) == 2 and all(isinstance(x, str) for x in layer)


def variables_json(planned, nodes) -> list:
    """plan.json `variables`: each PlannedVariable with its graph node (or None)."""
    return [{**p._asdict(), "node": node} for p, node in zip(planned, nodes)]

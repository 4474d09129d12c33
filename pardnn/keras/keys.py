"""Keys of a Keras model's variables that do not depend on Keras' names.

A variable's key is its layer's path in the model and its name in the layer:
`layers[3]/kernel` is the kernel of the model's fourth layer (in the order Keras
tracks them, the InputLayer of a functional model included), `layers[5]/layers[0]/
kernel` a kernel of a layer nested in it. An optimizer slot is known by its
variable's key (`optimizer/layers[3]/kernel/momentum`), the optimizer's own state by
its name (`optimizer/iteration`), a compiled metric's state by the metric's place
in `model.metrics` (`metrics[0]/total`). A layer shared by several calls has one
path, as it has one set of variables. Two builds of one model give the same keys
whatever Keras named its layers, so the keys say whether the model built in
`plan.scope()` is the planned one (pardnn.keras.matching).
"""

from __future__ import annotations

import keras


def layer_paths(model) -> list:
    """[(path, layer)] of every layer under `model`, depth first, in Keras' order."""
    found = []

    def walk(layer, path):
        for i, child in enumerate(_children(layer)):
            child_path = f"{path}/layers[{i}]" if path else f"layers[{i}]"
            found.append((child_path, child))
            walk(child, child_path)
    walk(model, "")
    return found


def layer_summary(model) -> list:
    """[[path, class name]] of the layers under `model`: the structure a plan records."""
    return [[path, type(layer).__name__] for path, layer in layer_paths(model)]


def variable_keys(models=(), optimizers=()) -> dict:
    """{id(tf.Variable): key} of the variables of `models` (their layers' and compiled
    metrics') and of `optimizers` (each compiled model's own included)."""
    keys, by_path = {}, {}
    for m, model in enumerate(models):
        root = "" if len(models) == 1 else f"models[{m}]/"
        for path, layer in [("", model)] + layer_paths(model):
            own = _own_variables(layer)
            _name_all(keys, [(f"{root}{path}/{v.name}" if path else f"{root}{v.name}", v) for v in own])
            by_path.update({v.path: keys[id(_tf(v))] for v in own})
        for i, metric in enumerate(getattr(model, "metrics", []) if getattr(model, "compiled", False) else []):
            _name_all(keys, [(f"{root}metrics[{i}]/{v.name}", v) for v in metric.variables])
    compiled = [model.optimizer for model in models if getattr(model, "optimizer", None) is not None]
    for o, optimizer in enumerate(_unique(list(optimizers) + compiled)):
        root = "optimizer" if o == 0 else f"optimizers[{o}]"
        _name_all(keys, [(f"{root}/{_slot_name(v, by_path)}", v) for v in optimizer.variables])
    return keys


def _slot_name(variable, by_path) -> str:
    """`<its variable's key>/<slot>` for an optimizer slot (Keras names one
    `<variable path with _ for />_<slot>`), else the variable's own name."""
    best = None
    for path, key in by_path.items():
        prefix = path.replace("/", "_") + "_"
        if variable.name.startswith(prefix) and (best is None or len(prefix) > len(best[0])):
            best = (prefix, key)
    return variable.name if best is None else f"{best[1]}/{variable.name[len(best[0]):]}"


def _name_all(keys, named) -> None:
    """keys[id(tf variable)] = name for each (name, variable) not named yet; a name
    taken twice gets `#2`, `#3`, ... in order."""
    taken = set(keys.values())
    for name, variable in named:
        if id(_tf(variable)) in keys:
            continue
        key, n = name, 1
        while key in taken:
            n += 1
            key = f"{name}#{n}"
        keys[id(_tf(variable))] = key
        taken.add(key)


def _own_variables(layer) -> list:
    """The variables of `layer` that none of its sublayers holds."""
    inner = {id(v) for child in _children(layer) for v in child.variables}
    return [v for v in layer.variables if id(v) not in inner]


def _children(layer) -> list:
    return list(layer._flatten_layers(include_self=False, recursive=False))


def _unique(items) -> list:
    seen, out = set(), []
    for item in items:
        if id(item) not in seen:
            seen.add(id(item))
            out.append(item)
    return out


def _tf(variable):
    """The tf.Variable behind a Keras variable (a tf.Variable is its own)."""
    return variable.value if isinstance(variable, keras.Variable) else variable

"""Run by tests/test_keras_recompute.py in a subprocess (K logical CPU devices must be
set before TensorFlow initialises), as a user's script runs: models of
tests/helpers/keras_models.py planned with recompute="on", built placed and trained
under TF's default function config (Grappler on; NAME:grappler-off: off), beside the
same model unplaced. Prints one JSON line.

    keras_recompute_script.py ROOT NAME[:grappler-off] [...] [bad]
"""

import csv
import json
import os
import re
import sys

import pardnn.keras
import tensorflow as tf

import pardnn.tf.function as placed_function
from pardnn.base.errors import UserError
from pardnn.tf.graphdef import read_graph_def

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import keras_models as km

K, BATCH, STEPS = 2, 8, 3
PREFIX = "pardnn_recompute/"
SEEN, _REAL = [], placed_function._with_run_metadata


def _spy(call):
    result, metadata = _REAL(call)
    SEEN.append(metadata)
    return result, metadata


placed_function._with_run_metadata = _spy


def flow(root, name, folder=None):
    build, _ = km.MODELS[name]
    data = km.batches(name, STEPS, BATCH)
    custom = name == "normalized"
    reference = build()
    plan = pardnn.keras.plan(build, km.specs(data[0]), devices=f"cpu:{K}", directory=f"{root}/{folder or name}",
                             step=km.train_step if custom else None, reserve=0, recompute="on", verbose=0)
    built, fn, placed, unplaced, check = km.placed_and_unplaced(plan, build, reference, data, custom, BATCH)
    rows = list(csv.reader(open(f"{plan.directory}/recompute.csv")))[1:]
    copies = sorted({n for p, _, c in rows for n in (p, c) if n.startswith(PREFIX)})
    traced = placed_function.requested_devices(fn)
    return {"placed": placed, "unplaced": unplaced, "moved": check.moved, "copies": copies,
            "merged": merged_back(rows, traced), "ran": ran_copies(), "originals_ran": sorted(c for c in copies if c[len(PREFIX):] in ran_names()), "read": copies_read(), "unread": unread(rows, traced),
            "original_ops": original_ops(plan.directory, copies)}


def _partition_nodes():
    for function in (SEEN[-1].function_graphs if SEEN else []):
        for partition in function.partition_graphs:
            yield from partition.node


def ran_copies():
    """Copies in the partition graphs of the step's first run (after Grappler), by
    their names in the step (less the prefix TF gives an inlined call)."""
    return sorted(n for n in ran_names() if n.startswith(PREFIX))


def ran_names():
    """The names of the ops in those partition graphs, less an inlined call's prefix."""
    return {placed_function._INLINED.sub("", n.name) for n in _partition_nodes() if not n.op.startswith("_")}


def copies_read():
    """How many data inputs of ops other than copies read a copy, in those graphs."""
    return sum(PREFIX in i and not i.startswith("^") for n in _partition_nodes() if PREFIX not in n.name
               for i in n.input)


def unread(rows, traced):
    """Copies no op of the trace (`traced`: its op names, copies made included) reads,
    directly or through other copies: a reader the plan names that this trace lacks
    (the function's output Identity, made after the step's body)."""
    readers = {}
    for producer, slot, consumer in rows:
        if producer.startswith(PREFIX) and slot != "-1":
            readers.setdefault(producer, set()).add(consumer)
    dead, changed = set(), True
    while changed:
        changed = False
        for copy, consumers in readers.items():
            if copy not in dead and all(c not in traced or c in dead for c in consumers):
                dead.add(copy)
                changed = True
    return sorted(dead)


def merged_back(rows, traced):
    """(reads of a copy in the plan whose reader is in the trace (`traced`) and ran,
    those that read the original instead): what a copy merged back into its original
    (by CSE) leaves. A tensor
    from another device is read through a _Recv, whose tensor_name names the sender."""
    nodes = {placed_function._INLINED.sub("", n.name): n for n in _partition_nodes()}
    sender = {name: re.sub(r"^edge_[0-9]+_", "", n.attr["tensor_name"].s.decode())
              for name, n in nodes.items() if n.op.endswith("Recv")}

    def source(text):
        name = placed_function._INLINED.sub("", text.lstrip("^").split(":")[0])
        return placed_function._INLINED.sub("", sender.get(name, name))
    checked = wrong = 0
    for producer, slot, consumer in rows:
        if not producer.startswith(PREFIX) or slot == "-1" or consumer.startswith(PREFIX) \
                or consumer not in nodes or consumer not in traced:
            continue
        sources = {source(i) for i in nodes[consumer].input if not i.startswith("^")}
        checked += 1
        wrong += producer[len(PREFIX):] in sources and producer not in sources
    return [checked, wrong]


def original_ops(directory, copies):
    """Op type of each copy's original, from the plan's profile graph."""
    nodes = {n.name: n.op for n in read_graph_def(f"{directory}/profile/graph.pb").node}
    return {c: nodes[c[len(PREFIX):]] for c in copies}


def bad(root):
    """The error a plan asking to recompute a stateful op (an AssignVariableOp of the
    optimizer, written into recompute.csv by hand) gets when its step is traced."""
    plan = pardnn.keras.plan(km.normalized, km.specs(km.batches("normalized", 1, BATCH)[0]), devices=f"cpu:{K}",
                             directory=f"{root}/bad", step=km.train_step, reserve=0, recompute="on", verbose=0)
    graph = read_graph_def(f"{plan.directory}/profile/graph.pb")
    assign = next(n for n in graph.node if n.op == "AssignVariableOp")
    reader = next(n for n in graph.node if n.name != assign.name and assign.name in
                  [i.lstrip("^") for i in n.input])
    with open(f"{plan.directory}/recompute.csv", "a") as f:
        f.write(f"{PREFIX}{assign.name},-1,{reader.name}\n")
    with plan.scope():
        built = km.normalized()
    step = plan.step(km.train_step, *built)
    try:
        step(*km.batches("normalized", 1, BATCH)[0])
        return {"error": None, "op": assign.name}
    except UserError as exc:
        return {"error": str(exc), "op": assign.name}


def main_script(root, *names):
    tf.config.set_logical_device_configuration(
        tf.config.list_physical_devices("CPU")[0], [tf.config.LogicalDeviceConfiguration()] * K)
    facts = {}
    for name in names:
        if name == "bad":
            facts[name] = bad(root)
        elif name.endswith(":grappler-off"):        # as pardnn's session config: no graph rewrites
            tf.config.optimizer.set_experimental_options({"disable_meta_optimizer": True})
            facts[name] = flow(root, name.split(":")[0], name.replace(":", "_"))
            tf.config.optimizer.set_experimental_options({"disable_meta_optimizer": False})
        else:
            facts[name] = flow(root, name)
    print(json.dumps(facts))


if __name__ == "__main__":
    main_script(*sys.argv[1:])

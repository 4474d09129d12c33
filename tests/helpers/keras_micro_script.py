"""Run by tests/test_keras_micro_batches.py in a subprocess (K logical CPU devices
must be set before TensorFlow initialises), as a user's script runs: models of
tests/helpers/keras_models.py planned with micro-batches, built placed and trained,
beside the same model unplaced and unsplit. Prints one JSON line.

    keras_micro_script.py ROOT NAME:M [NAME:M ...]
"""

import csv
import io
import json
import sys
import contextlib
import os

import pardnn.keras
import keras
import tensorflow as tf

from pardnn.base.errors import UserError
import pardnn.tf.function as placed_function

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import keras_models as km

K, BATCH, STEPS = 4, 8, 3


def flow(root, name, m, schedule="auto"):
    build, _ = km.MODELS[name]
    data = km.batches(name, STEPS, BATCH)
    custom = name == "normalized"
    if custom and m != "auto":          # a last, smaller batch of M + 1 samples: one slice of 2, the rest of 1
        data[-1] = tf.nest.map_structure(lambda a: a[:m + 1], data[-1])
    reference = build()
    summary = io.StringIO()
    with contextlib.redirect_stdout(summary):
        plan = pardnn.keras.plan(build, km.specs(data[0]), devices=f"cpu:{K}", directory=f"{root}/{name}{m}",
                                 step=km.train_step if custom else None, micro_batches=m, reserve=0,
                                 schedule=schedule)
    built, _, placed, unplaced, check = km.placed_and_unplaced(plan, build, reference, data, custom, BATCH)
    iterations = int((built[1] if custom else built[0].optimizer).iterations.numpy())
    model = built[0]
    ref_model = reference[0] if custom else reference
    gap = max(float(tf.reduce_max(tf.abs(a - b))) for a, b in zip(model.trainable_weights, ref_model.trainable_weights))
    order = list(csv.reader(open(f"{plan.directory}/order.csv")))[1:] if os.path.exists(
        f"{plan.directory}/order.csv") else []
    return {"placed": placed, "unplaced": unplaced, "moved": check.moved, "devices": len(check.nodes_per_device),
            "order": len(order), "dropped": kept_order(order) if custom else None,
            "schedule": plan.report.get("schedule"),
            "samples": [plan.report.get("samples_per_step"), plan.report.get("time_per_sample_us"),
                        plan.report["makespan_us"]],
            "inputs_profile": json.load(open(f"{plan.directory}/inputs.json"))["profile"],
            "directory": os.path.abspath(plan.directory),
            "iterations": iterations, "weight_gap": gap, "summary": summary.getvalue(),
            "plan_micro_batches": json.load(open(f"{root}/{name}{m}/plan.json"))["micro_batches"]}


def kept_order(order):
    """[pairs found in one partition graph of the step's first run, pairs whose control
    edge TF dropped]: what the executor ran with (Grappler has had its turn by then)."""
    inputs = {}
    for function in (SEEN[-1].function_graphs if SEEN else []):
        for partition in function.partition_graphs:
            for node in partition.node:
                inputs[node.name] = set(node.input)
    pairs = [(b, a) for b, a in order if b in inputs and a in inputs]
    return [len(pairs), sum(f"^{b}" not in inputs[a] and b not in {i.split(":")[0] for i in inputs[a]}
                            for b, a in pairs)]


def _spy(call):
    result, metadata = _REAL(call)
    SEEN.append(metadata)
    return result, metadata


SEEN, _REAL = [], placed_function._with_run_metadata
placed_function._with_run_metadata = _spy


def bad(root):
    build, _ = km.MODELS["normalized"]
    data = km.batches("normalized", 1, BATCH)
    errors = {}
    for m in (0, 3, 16, True, "two"):
        try:
            pardnn.keras.plan(build, km.specs(data[0]), devices=f"cpu:{K}", directory=f"{root}/bad",
                              step=km.train_step, micro_batches=m, verbose=0)
            errors[str(m)] = None
        except UserError as exc:
            errors[str(m)] = str(exc)

    def no_update(model, optimizer, x, y):
        return keras.ops.mean(keras.ops.square(model(x) - y))
    try:
        pardnn.keras.plan(build, km.specs(data[0]), devices=f"cpu:{K}", directory=f"{root}/bad",
                          step=no_update, micro_batches=2, verbose=0)
        errors["no_update"] = None
    except UserError as exc:
        errors["no_update"] = str(exc)
    errors["written"] = os.path.exists(f"{root}/bad")
    plan = pardnn.keras.plan(build, km.specs(data[0]), devices=f"cpu:{K}", directory=f"{root}/four",
                             step=km.train_step, micro_batches=4, verbose=0)
    with plan.scope():
        built = build()
    step = plan.step(km.train_step, *built)
    try:
        step(*tf.nest.map_structure(lambda a: a[:2], data[0]))          # 2 samples, 4 micro-batches
        errors["too_small"] = None
    except tf.errors.InvalidArgumentError as exc:
        errors["too_small"] = exc.message
    return errors


def main_script(root, *cases):
    tf.config.set_logical_device_configuration(
        tf.config.list_physical_devices("CPU")[0], [tf.config.LogicalDeviceConfiguration()] * K)
    facts = {}
    for case in cases:
        if case == "bad":
            facts["bad"] = bad(root)
            continue
        name, m, *schedule = case.split(":")
        facts[case] = flow(root, name, m if m == "auto" else int(m), *schedule)
    print(json.dumps(facts))


if __name__ == "__main__":
    main_script(*sys.argv[1:])

"""Run by tests/test_keras_plan.py in subprocesses (K logical CPU devices must be set
before TensorFlow initialises), as a user's script runs: TF's default config, no
keras.backend.clear_session(). Prints one JSON line.

    keras_plan_script.py models ROOT [NAME...]
                                       plan, build placed and train the models of
                                       tests/helpers/keras_models.py (all by default);
                                       NAME `bad` (after resnet): the bad inputs
    keras_plan_script.py reload ROOT   another process (after siamese's): load_plan of its plan,
                                       planned again; checkpoints both ways, model.save
    keras_plan_script.py drift ROOT N  each model placed and unplaced for N steps (their
                                       losses; tools/keras_drift.py compares them)
"""

import contextlib
import json
import os
import sys

import numpy as np

import pardnn.keras
import keras
import tensorflow as tf

from pardnn.keras.keys import variable_keys
from pardnn.tf import check_function_placement, check_nested_placement
from pardnn.tf.function import relaxed_batch, requested_devices

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import keras_models as km

K, BATCH, STEPS = 4, 8, 3
PARTIAL = ("siamese", "normalized")      # trained with a last, partial batch
MEMORY = {"resnet": "1200KiB", "transformer": "500KiB", "siamese": "48KiB", "normalized": "128KiB"}


@contextlib.contextmanager
def recording(created):
    def record(next_creator, **kwargs):
        created.append(next_creator(**kwargs))
        return created[-1]
    with tf.variable_creator_scope(record):
        yield


def fit(model, data):
    return km.fit_losses(model, data, BATCH)


def plan_of(root, name, **kwargs):
    build, _ = km.MODELS[name]
    step = km.train_step if name == "normalized" else None
    return pardnn.keras.plan(build, km.specs(km.batches(name, 1, BATCH)[0]), devices=f"cpu:{K}",
                             memory=MEMORY[name], reserve=0, step=step, directory=f"{root}/{name}",
                             verbose=0, **kwargs)


def where(plan, built, created):
    """Facts about where the scope built each variable: by key against plan.json, and
    by graph node against placement.csv."""
    models = [b for b in built if isinstance(b, keras.Model)]
    optimizers = [b for b in built if isinstance(b, keras.optimizers.Optimizer)]
    keys = variable_keys(models, optimizers)
    planned = plan.variable_devices()
    with open(f"{plan.directory}/plan.json") as f:
        nodes = {v["key"]: v["node"] for v in json.load(f)["variables"]}
    placement = dict(line.strip().rsplit(",", 1) for line in open(plan.placement_csv))
    wrong = [v.name for v in created if planned.get(keys.get(id(v))) != v.device.replace(
        "/job:localhost/replica:0/task:0", "")]
    off_csv = [v.name for v in created if nodes.get(keys.get(id(v))) and
               placement[nodes[keys[id(v)]]] != v.device]
    return {"variables": len(created), "planned": len(planned), "keyed": sum(id(v) in keys for v in created),
            "wrong_device": wrong, "off_placement_csv": off_csv,
            "devices_used": len({v.device for v in created})}


def model_flow(root, name):
    build, _ = km.MODELS[name]
    data = km.batches(name, STEPS, BATCH)
    if name in PARTIAL:                 # a last batch of half the size: one trace serves both
        data[-1] = tf.nest.map_structure(lambda a: a[:BATCH // 2], data[-1])
    reference = build()                 # an unplaced model first: Keras' counters move on
    plan = plan_of(root, name)
    created = []
    with recording(created):
        with plan.scope():
            built = build()
            if name == "resnet":
                built.jit_compile = True        # as compile(jit_compile=True): the scope turns it off
        built = built if isinstance(built, tuple) else (built,)
        if name == "normalized":
            step = plan.step(km.train_step, *built)
    facts = where(plan, built, created)
    if name == "normalized":
        first, check = check_function_placement(step, data[0])
        facts["placed"] = [float(first)] + [float(step(*b)) for b in data[1:]]
        ref_step = tf.function(lambda x, y: km.train_step(*reference, x, y))
        facts["unplaced"] = [float(ref_step(*b)) for b in data]
        facts["read_in_build"] = [float(layer.total) for layer in built[0].layers
                                  if isinstance(layer, km.ReadsInBuild)]
    else:
        facts["jit_compile"] = built[0].jit_compile
        facts.update(evaluated(plan, built[0], reference, data))       # before fit: the same weights
        facts["placed"], check = check_nested_placement(built[0].train_step, lambda: fit(built[0], data))
        facts["unplaced"] = fit(reference, data)
    facts["moved"], facts["per_device"] = check.moved, check.nodes_per_device
    return facts


class Relaxed:
    """A Keras step traced as the placed one is, once with the batch size unknown, so
    that the results compared differ by placement alone, not by the kernels oneDNN
    picks for a known batch size (docs/tf2.md, "Drift")."""

    def __init__(self, step):
        self.step, self.traced = step, None

    def __call__(self, data):
        if self.traced is None:
            self.traced = tf.function(self.step, input_signature=[relaxed_batch(data)])
        return self.traced(data)


def evaluated(plan, model, reference, data):
    """evaluate and predict of the placed model and of the unplaced one, built alike:
    their results, where the placed one's ops ran, and how many of them placement.csv
    names (the others follow it: pardnn.tf.function._follow_placement)."""
    x = tf.nest.map_structure(lambda *a: np.concatenate(a), *[b[0] for b in data])
    y = tf.nest.map_structure(lambda *a: np.concatenate(a), *[b[1] for b in data])
    named = dict(line.strip().rsplit(",", 1) for line in open(plan.placement_csv))
    facts = {}
    calls = {"evaluate": (model.test_step, lambda m: m.evaluate(x, y, batch_size=BATCH, verbose=0)),
             "predict": (model.predict_step, lambda m: m.predict(x, batch_size=BATCH, verbose=0))}
    reference.test_step, reference.predict_step = Relaxed(reference.test_step), Relaxed(reference.predict_step)
    for kind, (step, call) in calls.items():
        placed, check = check_nested_placement(step, lambda c=call: c(model))
        unplaced = call(reference)
        asked = requested_devices(step)
        facts[kind] = {"moved": check.moved, "per_device": check.nodes_per_device, "ops": len(asked),
                       "named": sum(n in named for n in asked),
                       "placed": [np.asarray(a).tolist() for a in tf.nest.flatten(placed)],
                       "unplaced": [np.asarray(a).tolist() for a in tf.nest.flatten(unplaced)]}
    return facts


def bad_inputs(root):
    """Each bad input's message (None: no error), and whether anything was written or ran."""
    resnet_plan = pardnn.keras.load_plan(f"{root}/resnet")
    siamese_batch = km.batches("siamese", 1, BATCH)[0]
    out = {}

    def in_scope(plan, build):
        with plan.scope():
            build()
    out["layer_added"] = km.error_of(lambda: in_scope(resnet_plan, lambda: km.resnet(extra="dense")))
    out["shape_changed"] = km.error_of(lambda: in_scope(resnet_plan, lambda: km.resnet(classes=12)))
    out["layer_without_variables_added"] = km.error_of(lambda: in_scope(resnet_plan, lambda: km.resnet(extra="relu")))
    six = pardnn.keras.plan(km.siamese, km.specs(siamese_batch), devices=f"cpu:{K + 2}", memory="48KiB",
                            reserve=0, directory=f"{root}/six", verbose=0)
    built = []
    out["lacking_devices"] = km.error_of(lambda: in_scope(six, lambda: built.append(km.siamese())))
    out["lacking_devices_built"] = len(built)
    plan_args = {"devices": f"cpu:{K}", "memory": "48KiB", "verbose": 0}
    out["no_model"] = km.error_of(lambda: pardnn.keras.plan(lambda: None, km.specs(siamese_batch),
                                                         directory=f"{root}/none", **plan_args))
    out["optimizer_only"] = km.error_of(lambda: pardnn.keras.plan(keras.optimizers.Adam, km.specs(siamese_batch),
                                                               directory=f"{root}/optimizer", **plan_args))
    out["not_compiled"] = km.error_of(lambda: pardnn.keras.plan(_uncompiled, km.specs(siamese_batch),
                                                             directory=f"{root}/uncompiled", **plan_args))
    x, y = km.specs(siamese_batch)
    out["input_missing"] = km.error_of(lambda: pardnn.keras.plan(km.siamese, ({"a": x["a"]}, y),
                                                              directory=f"{root}/missing", **plan_args))
    wide = tf.TensorSpec([BATCH, 12, 12, 4])
    out["input_shape"] = km.error_of(lambda: pardnn.keras.plan(km.resnet, (wide, tf.TensorSpec([BATCH], tf.int32)),
                                                            directory=f"{root}/wide", **plan_args))
    images = tf.TensorSpec([BATCH, 12, 12, 3])
    out["target_shape"] = km.error_of(lambda: pardnn.keras.plan(km.resnet, (images, tf.TensorSpec([BATCH, 5], tf.int32)),
                                                             directory=f"{root}/target", **plan_args))
    out["written"] = sorted(d for d in ("none", "optimizer", "uncompiled", "missing", "wide", "target")
                            if os.path.exists(f"{root}/{d}"))
    return out


def _uncompiled():
    model = km.siamese()
    return keras.Model(model.inputs, model.outputs)


def models_main(root, *names):
    """The flows of the models named (all by default); `bad` (after resnet): the bad inputs."""
    result = {name: bad_inputs(root) if name == "bad" else model_flow(root, name) for name in names or km.MODELS}
    print(json.dumps(result))


def values(variables):
    return [v.numpy() for v in variables]


def same(a, b):
    return len(a) == len(b) and all(x.shape == y.shape and np.array_equal(x, y) for x, y in zip(a, b))


def saved(model):
    """What save_weights saves of a Keras 3 model: its weights (not the seed generators'
    state) and the optimizer's variables."""
    return model.weights + model.optimizer.variables


def state(model):
    """Every variable of a model and its optimizer."""
    return model.variables + model.optimizer.variables


def checkpointed(model):
    """What tf.train.Checkpoint(model=, optimizer=) saves of a Keras 3 model: its
    trainable variables (through the optimizer) and the optimizer's."""
    return model.trainable_variables + model.optimizer.variables


def built_siamese():
    model = km.siamese()
    model.optimizer.build(model.trainable_variables)
    return model


def reload_main(root):
    """load_plan in another process; checkpoints of placed and unplaced models both ways."""
    plan = pardnn.keras.load_plan(f"{root}/siamese")
    data = km.batches("siamese", 4, BATCH)
    created = []
    with recording(created):
        with plan.scope():
            placed = km.siamese()
    facts = {"where": where(plan, (placed,), created)}
    again = plan_of(f"{root}/again", "siamese")          # planned again in this process
    facts["same_placement"] = open(again.placement_csv).read() == open(plan.placement_csv).read()
    facts["placed"] = fit(placed, data[:2])

    # placed -> unplaced: save_weights (the whole state, optimizer included), tf.train.Checkpoint
    # (Keras 3 saves the trainable variables through the optimizer only), model.save
    placed.save_weights(f"{root}/placed.weights.h5")
    tf.train.Checkpoint(model=placed, optimizer=placed.optimizer).write(f"{root}/placed_ckpt")
    placed.save(f"{root}/placed.keras")
    np.savez(f"{root}/placed_weights.npz", *values(placed.weights))
    facts["checkpoint_holds"] = len(tf.train.list_variables(f"{root}/placed_ckpt")) - 1
    facts["checkpointed"] = len(checkpointed(placed))
    unplaced = built_siamese()
    unplaced.load_weights(f"{root}/placed.weights.h5")
    facts["weights_to_unplaced"] = same(values(saved(unplaced)), values(saved(placed)))
    unplaced = built_siamese()
    tf.train.Checkpoint(model=unplaced, optimizer=unplaced.optimizer).read(f"{root}/placed_ckpt").assert_consumed()
    facts["checkpoint_to_unplaced"] = same(values(checkpointed(unplaced)), values(checkpointed(placed)))

    # unplaced -> placed: an unplaced model trained two batches, restored into placed ones;
    # the restored one goes on training from it as the unplaced one does
    trained = km.siamese()
    facts["unplaced"] = fit(trained, data[:2])
    trained.save_weights(f"{root}/unplaced.weights.h5")
    tf.train.Checkpoint(model=trained, optimizer=trained.optimizer).write(f"{root}/unplaced_ckpt")
    with plan.scope():
        restored = km.siamese()
    tf.train.Checkpoint(model=restored, optimizer=restored.optimizer).read(f"{root}/unplaced_ckpt").assert_consumed()
    facts["checkpoint_to_placed"] = same(values(checkpointed(restored)), values(checkpointed(trained)))
    with plan.scope():
        restored = km.siamese()
    restored.load_weights(f"{root}/unplaced.weights.h5")
    facts["weights_to_placed"] = same(values(saved(restored)), values(saved(trained)))
    fresh = built_siamese()                             # the unplaced model from the same checkpoint
    fresh.load_weights(f"{root}/unplaced.weights.h5")
    facts["restored_alike"] = same(values(state(restored)), values(state(fresh)))
    devices = plan.variable_devices()
    keys = variable_keys([restored])
    facts["restored_wrong_device"] = [v.name for v in state(restored) if devices[keys[id(v.value)]]
                                      != v.value.device.replace("/job:localhost/replica:0/task:0", "")]
    facts["continued_placed"], check = check_nested_placement(restored.train_step,
                                                              lambda: fit(restored, data[2:]))
    facts["continued_moved"] = check.moved
    facts["continued_unplaced"] = fit(fresh, data[2:])
    print(json.dumps(facts))


def drift_main(root, steps):
    """Each model's losses over `steps` batches: placed; unplaced (Keras' own trace, for
    a batch of known size); unplaced traced as the placed step is, with the batch
    dimension unknown (relaxed_batch), so that what placement changes is told apart
    from what that trace's kernels change."""
    result = {}
    for name in km.MODELS:
        build, _ = km.MODELS[name]
        data = km.batches(name, steps, BATCH)
        plan = plan_of(root, name)
        with plan.scope():
            built = build()
        signature = [relaxed_batch(b) for b in km.specs(data[0])]
        if name == "normalized":
            step = plan.step(km.train_step, *built)
            runs = {"placed": step}
            for kind, sig in (("unplaced", None), ("unplaced_relaxed", signature)):
                reference = build()
                runs[kind] = tf.function(lambda x, y, r=reference: km.train_step(*r, x, y), input_signature=sig)
            result[name] = {kind: [float(fn(*b)) for b in data] for kind, fn in runs.items()}
        else:
            relaxed = build()
            relaxed.train_step = tf.function(relaxed.train_step, input_signature=[tuple(signature)])
            result[name] = {"placed": fit(built, data), "unplaced": fit(build(), data),
                            "unplaced_relaxed": fit(relaxed, data)}
    print(json.dumps(result))


def main_script(mode, root, *args):
    tf.config.set_logical_device_configuration(
        tf.config.list_physical_devices("CPU")[0], [tf.config.LogicalDeviceConfiguration()] * K)
    if mode == "drift":
        drift_main(root, int(args[0]))
    else:
        {"models": models_main, "reload": reload_main}[mode](root, *args)


if __name__ == "__main__":
    main_script(*sys.argv[1:])

"""Recomputation in a real Keras run: what TF's CPU allocator holds over one step of the
placed tf.function, with and without the plan's recomputation (issue 51).

    python -m tools.bench_keras_recompute_run [--model keras-encoder|keras-resnet]
        [--set knob=value ...] [--dir DIR]

Plans a Keras model of tools/keras_models.py (the knobs and batch of
tools/bench_least_memory.py) on cpu:1 twice with pardnn.keras.plan, a custom training
loop with Adam, `recompute="off"` and `"on"` (no reserve), builds each plan's placed
step from the same weights in a fresh Keras session, and calls it once under TF's
default function config (Grappler on), as a user's script runs: the first loss,
beside the unplaced model's. Then STEPS more steps of the placed tf.function are
traced by pardnn.tf.profile_function (its graph in a TF1 session, pardnn's config,
FULL_TRACE): the allocator's largest peak over them, from TF's allocation records
(pardnn.tf.allocations), beside the emulator's peak less the resident state on that
measured profile, on one device (the plan's estimated profile has no scratch sizes).
It prints both for each plan, and the copies the plan makes.
"""

from __future__ import annotations

import argparse
import os
import tempfile

from tools.commit_line import print_commit

MODELS = ("keras-encoder", "keras-resnet")
STEPS = 3       # steps traced per plan: their largest peak


def make(name, knobs=None):
    """(build() -> (model, Adam), a batch (x, y)) for the Keras model `name` of
    tools/bench_least_memory.KERAS, seeded; `knobs` (dict) replace some of its knobs."""
    import keras
    import tensorflow as tf

    from tools import keras_models
    from tools.bench_least_memory import KERAS
    function, knobs, shape, dtype = KERAS[name][0], {**KERAS[name][1], **(knobs or {})}, *KERAS[name][2:]

    def build():
        keras.utils.set_random_seed(0)
        model = getattr(keras_models, function)(**knobs)
        opt = keras.optimizers.Adam(1e-3)
        opt.build(model.trainable_variables)
        return model, opt
    gen = tf.random.Generator.from_seed(0)
    x = gen.normal(shape, dtype=getattr(tf, dtype))
    y = gen.uniform([shape[0]], 0, 10, dtype=tf.int32)
    return build, (x, y)


def one_step(step, batch, out_dir, steps=None) -> tuple:
    """(first loss, bytes): the first call of `step` gives the loss; the bytes are
    the allocator's largest peak over `steps` (default STEPS) more steps of its placed
    tf.function, traced into `out_dir` by pardnn.tf.profile_function (imported into a
    TF1 session, pardnn's config, FULL_TRACE: every allocation recorded,
    pardnn.tf.allocations). The session's threads order ready ops differently from
    step to step, and so the peaks: the largest is what the step needs."""
    steps = STEPS if steps is None else steps
    from pardnn.tf import profile_function
    from pardnn.tf.allocations import HOST, step_peaks
    from tensorflow.core.protobuf.config_pb2 import RunMetadata
    loss = float(step(*batch))
    profile_function(step._fn, batch, steps=steps, out_dir=out_dir)
    peaks = []
    for i in range(steps):
        with open(os.path.join(out_dir, f"run_metadata_{i}.pb"), "rb") as f:
            metadata = RunMetadata.FromString(f.read())
        peaks += [p for device, p in step_peaks(metadata.step_stats).items() if device != HOST]
    return loss, max(peaks)


def planned_run(build, batch, directory, recompute) -> dict:
    """Plan `build`'s step on cpu:1 with `recompute`, then one placed step: its loss,
    measured and emulated peaks and copies."""
    import keras

    import pardnn.keras
    from pardnn.graph.recompute import PREFIX
    from tools.keras_models import custom_step
    from pardnn.io.placement import read_recompute_csv
    plan = pardnn.keras.plan(build, batch, devices="cpu:1", directory=directory, step=custom_step,
                             reserve=0, recompute=recompute, verbose=0)
    keras.backend.clear_session()
    with plan.scope():
        built = build()
    measured_dir = os.path.join(directory, "measured")
    loss, peak = one_step(plan.step(custom_step, *built), batch, measured_dir)
    rows = os.path.join(directory, "recompute.csv")
    copies = len({n for row in read_recompute_csv(rows) for n in (row[0], row[2]) if n.startswith(PREFIX)}) \
        if os.path.exists(rows) else 0
    return {"loss": loss, "measured": peak, "emulated": emulated_peak(measured_dir), "copies": copies}


def emulated_peak(measured_dir) -> int:
    """The emulator's peak less the resident state of the placed step as profiled
    into `measured_dir` (its measured sizes, scratch included), on one device."""
    import numpy as np

    from pardnn.hardware import parse_devices
    from pardnn.pipeline.load import load_cost_graph
    from tools.bench_recompute_run import emulated_peaks
    graph, _ = load_cost_graph(measured_dir)
    return emulated_peaks(graph, parse_devices("cpu:1"), np.zeros(graph.num_nodes, np.int32))[0]


def unplaced_loss(build, batch) -> float:
    """The first loss of the model trained as it is, no plan."""
    import keras
    import tensorflow as tf

    from tools.keras_models import custom_step
    keras.backend.clear_session()
    model, opt = build()
    return float(tf.function(lambda x, y: custom_step(model, opt, x, y))(*batch))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="keras-encoder", choices=MODELS)
    parser.add_argument("--set", action="append", default=[], dest="knobs", metavar="KNOB=VALUE",
                        help="a knob of the model's function in tools/keras_models.py that keeps its input's "
                             "shape (an int: layers, heads, blocks, width)")
    parser.add_argument("--dir", default=None)
    args = parser.parse_args(argv)
    print_commit()
    import pardnn.tf.quiet_import  # noqa: F401  (quiet TensorFlow import first)
    root = args.dir or tempfile.mkdtemp(prefix="bench_keras_recompute_")
    try:
        knobs = dict((k, int(v)) for k, v in (kv.split("=", 1) for kv in args.knobs))
    except ValueError:
        parser.error(f"--set: give KNOB=INT, got {' '.join(args.knobs)!r}")
    build, batch = make(args.model, knobs)
    runs = {name: planned_run(build, batch, os.path.join(root, name), name) for name in ("off", "on")}
    print(f"{args.model} {' '.join(args.knobs)} on cpu:1: {runs['on']['copies']} ops recomputed; "
          f"unplaced first loss {unplaced_loss(build, batch):.8g}")
    print("recompute  first loss    measured peak  emulated peak")
    for name, run in runs.items():
        print(f"{name:<10} {run['loss']:<13.8g} {run['measured']:<14,} {run['emulated']:,}")


if __name__ == "__main__":
    main()

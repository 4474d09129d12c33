"""Peak RSS of planning a Keras model too big to allocate: 2 GB of weights.

Builds a stack of Dense layers (WIDTH x WIDTH float32 kernels, LAYERS of them:
2.1 GB of weights, 6.4 GB with Adam's slots) under
pardnn.tf.shape_only_variables(), builds its Adam optimizer, and profiles the
training step with estimate="dgx-h100" (Grappler costs, nothing run), in a child
process; a second child plans the same stack behind a keras.layers.Normalization
(whose build reads its mean and variance: those two are materialised) with
pardnn.keras.plan for model.fit (shape-only build, estimate, placement on
dgx-h100 with 2 GiB per device, the plan folder written); a third only imports
TensorFlow and Keras (an empty TF process). Prints the peak RSS values
(ru_maxrss) and their differences.

    python -m tools.plan_rss [OUT_DIR]
"""

import json
import os
import subprocess
import sys
import tempfile

from tools.commit_line import print_commit

WIDTH, LAYERS, BATCH = 8192, 8, 32
EXAMPLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples", "keras_placed.py")

CHILD = r'''
import json, resource, runpy, sys, time
import pardnn.tf
import keras
import tensorflow as tf
WIDTH, LAYERS, BATCH, plan, out = {width}, {layers}, {batch}, {plan}, {out!r}
result = {{}}
if plan == "keras":
    import pardnn.keras
    t0 = time.perf_counter()
    def build():
        model = keras.Sequential([keras.layers.Input((WIDTH,)), keras.layers.Normalization()]
                                 + [keras.layers.Dense(WIDTH) for _ in range(LAYERS)])
        model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="mse")
        return model
    specs = (tf.TensorSpec([BATCH, WIDTH]), tf.TensorSpec([BATCH, WIDTH]))
    p = pardnn.keras.plan(build, specs, devices="dgx-h100", memory="2GiB", directory=out + "_keras", verbose=0)
    result = {{"variables": len(p.variable_devices()), "seconds": time.perf_counter() - t0,
               "fits": p.report["feasible"], "devices_used": len(set(p.variable_devices().values()))}}
elif plan:
    t0 = time.perf_counter()
    with pardnn.tf.shape_only_variables():
        model = keras.Sequential([keras.layers.Input((WIDTH,))]
                                 + [keras.layers.Dense(WIDTH) for _ in range(LAYERS)])
        opt = keras.optimizers.Adam(1e-3)
        opt.build(model.trainable_variables)
    training_step = runpy.run_path({example!r})["training_step"]     # examples/keras_placed.py
    step = training_step(model, opt)
    specs = (tf.TensorSpec([BATCH, WIDTH]), tf.TensorSpec([BATCH, WIDTH]))
    doc = pardnn.tf.profile_function(step, specs, out_dir=out, estimate="dgx-h100")
    size = lambda vs: sum(v.shape.num_elements() * 4 for v in vs)
    result = {{"weights_bytes": size(model.weights), "with_slots_bytes": size(model.weights + opt.variables),
               "variables": len(doc["variables"]), "seconds": time.perf_counter() - t0,
               "estimated_step_ms": doc["costs"]["op_time_us"] / 1e3}}
result["max_rss_kib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps(result))
'''


def child(plan, out: str) -> dict:
    """Peak RSS and facts of a child process: plan False (empty), True (pardnn.tf) or "keras"."""
    code = CHILD.format(width=WIDTH, layers=LAYERS, batch=BATCH, plan=repr(plan), out=out, example=EXAMPLE)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    if proc.returncode:
        sys.exit(proc.stderr[-3000:])
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main():
    print_commit()
    with tempfile.TemporaryDirectory(prefix="plan_rss_") as scratch:
        out = sys.argv[1] if len(sys.argv) > 1 else f"{scratch}/prof"
        empty = child(False, out)
        planned = child(True, out)
        keras_planned = child("keras", out)
    extra = (planned["max_rss_kib"] - empty["max_rss_kib"]) / 1024
    print(f"Keras model: {LAYERS} Dense {WIDTH}x{WIDTH}, {planned['weights_bytes'] / 1e9:.2f} GB of weights, "
          f"{planned['with_slots_bytes'] / 1e9:.2f} GB with Adam slots; {planned['variables']} variables")
    print(f"empty TF + Keras process: peak RSS {empty['max_rss_kib'] / 1024:.0f} MiB")
    print(f"planning (shape-only build + profile_function estimate=dgx-h100, {planned['seconds']:.1f} s): "
          f"peak RSS {planned['max_rss_kib'] / 1024:.0f} MiB, {extra:.0f} MiB above the empty process "
          f"(target < 500 MB)" + (f"; wrote {out}" if len(sys.argv) > 1 else ""))
    print(f"estimated step on one H100: {planned['estimated_step_ms']:.2f} ms")
    extra = (keras_planned["max_rss_kib"] - empty["max_rss_kib"]) / 1024
    print(f"pardnn.keras.plan of the stack behind a Normalization (read while built), for fit, placed on dgx-h100 "
          f"with 2GiB per device ({keras_planned['variables']} variables, {keras_planned['seconds']:.1f} s, "
          f"fits: {keras_planned['fits']}, variables on {keras_planned['devices_used']} devices): peak RSS "
          f"{keras_planned['max_rss_kib'] / 1024:.0f} MiB, {extra:.0f} MiB above the empty process")


if __name__ == "__main__":
    main()

"""Run by tests/test_tf2_host.py in a subprocess (K logical CPU devices must be set
before TensorFlow initialises): the host as a placement tier on this machine. Four
logical CPU devices, the last playing the host (a cluster file gives it a quarter of
the others' speed, `"host": true` and ample memory; the others a budget of a quarter
of the model's weights and Adam slots each, so that they cannot hold all of it). A
Keras MLP is planned shape-only with estimated costs, placed with `--algorithm
pardnn`, built under variables_placed and trained placed. Prints one JSON line."""

import csv
import json
import os
import sys

import numpy as np

import pardnn.keras
import pardnn.tf
import keras
import tensorflow as tf

from pardnn.cli import main
from pardnn.graph.node_memory import resident_bytes

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples"))
import keras_placed as example

K, BATCH, STEPS = 4, 16, 3
HOST = f"/job:localhost/replica:0/task:0/device:CPU:{K - 1}"


def build():
    """The example's MLP, its built Adam and the example's training step."""
    model = example.mlp()
    opt = keras.optimizers.Adam(1e-3)
    opt.build(model.trainable_variables)
    return model, opt, example.training_step(model, opt)


def cluster_file(root, budget):
    devices = [{"name": f"CPU:{i}", "memory": str(budget)} for i in range(K - 1)]
    devices.append({"name": f"CPU:{K - 1}", "memory": "1GiB", "host": True,
                    "rate": {"compute": 0.25, "memory": 0.25}, "memory_bandwidth": "20GB/s"})
    doc = {"format": "pardnn-cluster", "version": 1, "reserve": 0.0,
           "hosts": [{"task": "/job:localhost/replica:0/task:0", "devices": devices}],
           "intra_host": {"latency": "5us", "bandwidth": "10GB/s"}}
    path = f"{root}/cluster.json"
    with open(path, "w") as f:
        json.dump(doc, f)
    return path


def main_flow(root):
    keras.backend.clear_session()
    with pardnn.tf.shape_only_variables():
        model, opt, step = build()
    total = sum(int(np.prod(v.shape)) * np.dtype(v.dtype).itemsize for v in model.weights + opt.variables)
    specs = (tf.TensorSpec([BATCH, 64]), tf.TensorSpec([BATCH, 8]))
    pardnn.tf.profile_function(step, specs, out_dir=f"{root}/prof", estimate="dgx-h100")
    budget = total // 4
    assert main(["place", f"{root}/prof", "--devices", cluster_file(root, budget), "-o", f"{root}/placed"]) == 0
    device = dict(csv.reader(open(f"{root}/placed/placement.csv")))
    report = json.load(open(f"{root}/placed/report.json"))
    graph, _ = pardnn.tf.load_profile(f"{root}/prof")
    resident = {}
    for name, size in zip(graph.names, resident_bytes(graph)):
        if size:
            resident[device[name]] = resident.get(device[name], 0) + int(size)
    variables = json.load(open(f"{root}/placed/profile.json"))["variables"]
    on_host = sorted(name for node, name in variables.items() if device[node] == HOST)

    keras.backend.clear_session()
    with pardnn.tf.variables_placed(f"{root}/placed/placement.csv"):
        model, opt, step = build()
    created = model.weights + opt.variables
    host_built = sorted(v.path + ":0" for v in created if v.value.device == HOST)
    fn = pardnn.tf.placed(step, f"{root}/placed/placement.csv")
    rng = np.random.RandomState(0)
    data = [(tf.constant(rng.randn(BATCH, 64), tf.float32), tf.constant(rng.randn(BATCH, 8), tf.float32))
            for _ in range(STEPS)]
    first, check = pardnn.tf.check_function_placement(fn, data[0])
    placed = [float(first)] + [float(fn(*b)) for b in data[1:]]
    keras.backend.clear_session()
    _, _, reference = build()
    return {"budget": budget, "variable_bytes": total, "feasible": report["feasible"],
            "peaks": report["peak_memory_bytes"], "resident": resident, "on_host": on_host,
            "host_built": host_built, "moved": check.moved, "per_device": check.nodes_per_device,
            "placed": placed, "unplaced": [float(reference(*b)) for b in data]}


def compiled():
    """The example's MLP compiled with Adam and MSE (a plan for fit)."""
    model = example.mlp()
    model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="mse")
    return model


def keras_flow(root, budget):
    """The same offload through pardnn.keras: plan on the cluster file with `budget`
    bytes per accelerator (the host keeps the file's memory), build under plan.scope()
    and fit."""
    keras.backend.clear_session()
    rng = np.random.RandomState(1)
    data = [(rng.randn(BATCH, 64).astype("float32"), rng.randn(BATCH, 8).astype("float32")) for _ in range(STEPS)]
    reference = compiled()
    plan = pardnn.keras.plan(compiled, (tf.TensorSpec([BATCH, 64]), tf.TensorSpec([BATCH, 8])),
                             devices=cluster_file(root, 1 << 30), memory=budget, reserve=0,
                             directory=f"{root}/plan", verbose=0)
    planned = plan.variable_devices()
    created = []

    def record(next_creator, **kwargs):
        created.append(next_creator(**kwargs))
        return created[-1]
    with tf.variable_creator_scope(record), plan.scope():
        model = compiled()
    losses, check = pardnn.tf.check_nested_placement(model.train_step, lambda: fit_losses(model, data))
    inputs = json.load(open(f"{root}/plan/inputs.json"))
    local = "/job:localhost/replica:0/task:0"
    return {"planned_on_host": sum(device == HOST.replace(local, "") for device in planned.values()),
            "built_on_host": sum(v.device == HOST for v in created), "created": len(created),
            "inputs_memory": [inputs["memory"], inputs["host_memory"]],
            "keras_moved": check.moved, "keras_placed": losses, "keras_unplaced": fit_losses(reference, data)}


def fit_losses(model, data):
    """Per-batch losses of one epoch of fit over `data`, in order."""
    losses = []
    callback = keras.callbacks.LambdaCallback(on_train_batch_end=lambda _, logs: losses.append(float(logs["loss"])))
    model.fit(np.concatenate([x for x, _ in data]), np.concatenate([y for _, y in data]), batch_size=BATCH,
              epochs=1, shuffle=False, verbose=0, callbacks=[callback])
    return losses


if __name__ == "__main__":
    tf.config.set_logical_device_configuration(
        tf.config.list_physical_devices("CPU")[0], [tf.config.LogicalDeviceConfiguration()] * K)
    facts = main_flow(sys.argv[1])
    print(json.dumps({**facts, **keras_flow(sys.argv[1], facts["budget"])}))

"""`pardnn.keras.plan(build, batch_spec, devices, memory="auto")`: plan a Keras model in-process.

1. Build it shape-only (pardnn.tf.shape_only_variables: no variable holds memory,
   unless the build reads it), with Keras name counters of its own
   (pardnn.keras.names), and trace its step once as Keras' first step would
   (pardnn.keras.steps.warm_up: the optimizer's slots, compiled metrics).
2. Profile the step with estimated costs (pardnn.tf.profile_function, estimate=
   the devices' GPU preset): nothing runs.
3. Place it as `pardnn place` does (pardnn.pipeline.place_dir) on `devices` with
   `memory` per device ("auto": their real memory, pardnn.keras.devices).
4. Write the plan folder: the `pardnn place` outputs (placement.csv, report.json,
   trace.json, tensorboard/, placed_graph.pb, profile.json), the profile in
   profile/, and plan.json (pardnn.keras.plan_file): each variable's key
   (pardnn.keras.keys), creation order and device.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from typing import NamedTuple

import keras
import tensorflow as tf

from pardnn.base.errors import UserError
from pardnn.io.outputs import OutputDir, check_output_dir
from pardnn.io.summary import print_summary
from pardnn.base.jsonfile import read_json, write_json
from pardnn.keras.devices import estimate_preset, plan_cluster
from pardnn.keras.keys import layer_summary
from pardnn.keras.matching import Created, PlannedVariable, keys_of, owner_now
from pardnn.keras.micro_batches import check_micro_batches, coupled_layers, micro_batch_line
from pardnn.keras.names import KerasNames
from pardnn.keras.placed_plan import Plan, load_plan
from pardnn.keras.plan_file import FORMAT, PLAN_FILE, read_plan, variables_json
from pardnn.keras.specs import check_inputs, model_input, samples, to_json, to_specs
from pardnn.keras.steps import split_built, training_step, warm_up
from pardnn.pipeline.place_dir import place_inputs, place_profile, write_place_dir
from pardnn.pipeline.schedule import SCHEDULES, schedule_line
from pardnn.placers import registry
from pardnn.tf.function import profile_function
from pardnn.tf.plan_devices import local_device
from pardnn.tf.variables import shape_only_variables
from pardnn.base.units import MAX_TIME_US

UNUSED_DEVICE = "/device:CPU:0"     # a variable the step never touches: host memory


def plan(build, batch_spec, devices, memory="auto", *, step=None, directory="pardnn_plan", reserve=None,
         algorithm="pardnn", estimate=None, time_budget=None, micro_batches=1, schedule="auto",
         recompute="auto", memory_order="auto", verbose=1) -> Plan:
    """Plan `build()`'s model on `devices` and write the plan folder `directory`;
    returns the Plan (`with plan.scope(): model = build()`, then `model.fit`).

    build: returns the compiled model (a plan for fit), or with `step=` the model
    and its optimizer (a custom loop: `step(*built, *batch)` is one training step).
    batch_spec: one batch (pardnn.keras.specs). devices, memory, reserve: as
    `pardnn place --devices/--memory/--reserve`, memory "auto" the devices' real
    memory. estimate: the GPU preset the step's ops are costed for (default: the
    devices' preset, dgx-h100 for cpu:K). time_budget: seconds, as --time-budget.
    micro_batches: M, the step run as M micro-batches of the batch with one update
    (pardnn.keras.micro_batches; the plan's devices can then run them side by side),
    or "auto": the M of AUTO_COUNTS with the shortest emulated step that fits
    (`_auto`). schedule: the order the micro-batches run in, as `pardnn place
    --schedule` ("auto": the fastest that fits; pardnn.pipeline.schedule). recompute:
    as `pardnn place --recompute` ("auto": activations are recomputed only when
    nothing fits otherwise; "on", "off"); the placed step runs the copies
    (pardnn.tf.recompute_trace). memory_order: as `pardnn place --memory-order` ("auto":
    the big gradient sums, then the updates, one after another when nothing fits
    otherwise; "on", "off"), carried by the placed step (order.csv)."""
    if not callable(build):
        raise UserError(f"build: {build!r:.40} is not callable; give the function that builds the model")
    if step is not None and not callable(step):
        raise UserError(f"step: {step!r:.40} is not callable; give the training step fn(*built, *batch)")
    cluster = plan_cluster(devices, memory, reserve)
    registry.candidates(algorithm)
    budget_s = _budget(time_budget)
    check_output_dir(directory, "directory")
    batch = to_specs(batch_spec)
    if step is not None:
        batch = tuple(batch) if isinstance(batch, (tuple, list)) else (batch,)
    if micro_batches == "auto":
        def again(m, where, quiet):
            return plan(build, batch_spec, devices, memory, step=step, directory=where, reserve=reserve,
                        algorithm=algorithm, estimate=estimate, time_budget=time_budget, micro_batches=m,
                        schedule=schedule, recompute=recompute, memory_order=memory_order,
                        verbose=0 if quiet else verbose)
        return _auto(again, model_input(batch, fit=step is None), directory, verbose)
    micro_batches = check_micro_batches(micro_batches, model_input(batch, fit=step is None))
    if schedule not in ("auto",) + SCHEDULES:
        raise UserError(f"schedule: unknown schedule {schedule!r} (choose from auto, {', '.join(SCHEDULES)})")
    for name, value in (("recompute", recompute), ("memory_order", memory_order)):
        if value not in ("auto", "on", "off"):
            raise UserError(f"{name}: expected auto, on or off, got {value!r}")
    settings = {"devices": str(devices), "memory": memory if isinstance(memory, (int, str)) else "auto",
                "algorithm": algorithm, "estimate": estimate_preset(devices, estimate),
                "micro_batches": micro_batches}
    with KerasNames().active():
        traced = _traced_shape_only(build, step, batch, micro_batches)
        with OutputDir(directory, "directory") as out:
            profile = profile_function(traced.step_fn, traced.args, out_dir=out.temp("profile"),
                                       estimate=settings["estimate"],
                                       meta={"batch": samples(model_input(batch, fit=step is None))})
            # fetch off: the placed tf.function cannot read a variable twice
            placed = place_profile(os.path.join(out.staging, "profile"), cluster, algorithm, budget_s,
                                   devices=str(devices), schedule=schedule, recompute=recompute,
                                   order=memory_order, fetch="off")
            report = write_place_dir(out, placed, _inputs(directory, devices, placed.cluster, algorithm,
                                                          time_budget)).to_json()
            doc = _plan_doc(traced, profile, placed, settings, step, batch)
            nodes = doc.pop("nodes")
            write_json({**doc, "variables": variables_json(doc["variables"], nodes)}, out.temp(PLAN_FILE))
    if verbose:
        _print_summary(report, doc, directory)
    return Plan(directory, doc)


def _print_summary(report, doc, directory) -> None:
    """`pardnn place`'s summary of a plan, and its micro-batches' lines."""
    print_summary(report, out_dir=str(directory))
    if doc["micro_batches"] > 1:
        print(micro_batch_line(doc["micro_batches"], doc["coupled_layers"]))
        print(schedule_line(report))


AUTO_COUNTS = (1, 2, 4, 8, 16)      # micro-batch counts "auto" tries, in order, those that divide the batch


def _auto(again, batch, directory, verbose) -> Plan:
    """micro_batches="auto": each count of AUTO_COUNTS that divides the batch planned in
    turn (again(m, folder, quiet) plans it) into a folder beside `directory`, until
    one's emulated step is longer than the best so far (one device's step grows with
    M, so the steps fall, then rise); the best count that fits (the shortest step; the
    fewest micro-batches on a tie) becomes `directory`, its inputs.json pointing at
    its profile there. Its summary lists every count tried."""
    size = samples(batch)
    tried, plans = {}, {}
    with tempfile.TemporaryDirectory(dir=os.path.dirname(os.path.abspath(str(directory)))) as work:
        for m in [m for m in AUTO_COUNTS if size % m == 0]:
            plans[m] = again(m, os.path.join(work, f"m{m}"), True)
            report = plans[m].report
            tried[m] = (not report["feasible"], report["makespan_us"])
            if m > 1 and tried[m] > min(tried.values()):
                break
        best = min(tried, key=lambda m: (tried[m], m))
        chosen = _moved(plans[best].directory, directory)
    if verbose:
        _print_summary(chosen.report, read_plan(chosen.directory), directory)
        print("micro-batches auto: " + ", ".join(
            f"{m}: {us / 1000:.2f} ms{'' if not late else ' (does not fit)'}{' (kept)' if m == best else ''}"
            for m, (late, us) in tried.items()))
    return chosen


def _moved(source, directory) -> Plan:
    """The plan folder `source` made `directory` (which check_output_dir allowed: absent,
    empty, or pardnn's own output), its inputs.json's profile pointing there."""
    if os.path.isdir(str(directory)):
        shutil.rmtree(str(directory))
    os.replace(source, str(directory))
    inputs = os.path.join(str(directory), "inputs.json")
    doc = read_json(inputs)
    write_json({**doc, "profile": os.path.abspath(os.path.join(str(directory), "profile"))}, inputs)
    return load_plan(directory)


class _Traced(NamedTuple):
    """A build made shape-only and its step traced once."""

    models: list
    optimizers: list
    step_fn: object             # the tf.function profiled
    args: tuple
    created: list               # Created, in creation order
    keys: list                  # their keys (pardnn.keras.keys)


def _traced_shape_only(build, step, batch, micro_batches=1) -> _Traced:
    """build() shape-only, checked (a model, batch_spec its inputs'), its step traced
    once as Keras' first step would (creating what Keras builds lazily)."""
    created = []
    with shape_only_variables(), _recording(created):
        built = build()
    models, optimizers = split_built(built, step)
    check_inputs(models[0], model_input(batch, fit=step is None))
    step_fn, args = training_step(built, step, batch, micro_batches)
    with shape_only_variables(), _recording(created):
        warm_up(step_fn, args)
    return _Traced(models, optimizers, step_fn, args, created, keys_of(created, models, optimizers))


def _plan_doc(traced, profile, placed, settings, step, batch) -> dict:
    """plan.json's fields (pardnn.keras.plan_file), its variables as PlannedVariables and
    their graph nodes under "nodes"."""
    nodes = _variable_nodes(profile["variables"], traced.created)
    device_of = _devices(placed)
    planned = [PlannedVariable(key, c.variable.name.split(":")[0], c.short, c.variable.shape.as_list(),
                               c.variable.dtype.name, device_of[node] if node else UNUSED_DEVICE)
               for key, c, node in zip(traced.keys, traced.created, nodes)]
    return {"pardnn_keras_plan": FORMAT, "kind": "fit" if step is None else "step",
            "step": "train_step" if step is None else getattr(step, "__name__", "step"), **settings,
            "memory_bytes": [int(x) for x in placed.cluster.memory], "reserve": placed.cluster.reserve,
            "batch_spec": to_json(batch), "layers": [layer_summary(m) for m in traced.models],
            "coupled_layers": coupled_layers(traced.models) if settings["micro_batches"] > 1 else [],
            "variables": planned, "nodes": nodes, "tensorflow": tf.__version__, "keras": keras.__version__}


@contextlib.contextmanager
def _recording(created):
    """Appends a Created to `created` for each variable made inside."""
    def record(next_creator, **kwargs):
        owner = owner_now()
        variable = next_creator(**kwargs)
        created.append(Created(variable, kwargs.get("name") or "Variable", owner))
        return variable
    with tf.variable_creator_scope(record):
        yield


def _variable_nodes(profiled, created) -> list:
    """The graph node of each created variable (None: the step never touches it):
    profile.json lists node -> variable name in creation order, and variables of one
    name are matched in that order."""
    by_name = {}
    for i, c in enumerate(created):
        by_name.setdefault(c.variable.name, []).append(i)
    nodes = [None] * len(created)
    for node, name in profiled.items():
        if by_name.get(name):
            nodes[by_name[name].pop(0)] = node
    return nodes


def _inputs(directory, devices, cluster, algorithm, time_budget) -> dict:
    """inputs.json of the plan folder, so that `pardnn explain DIR` emulates its step
    again: its profile/, and the flags that give its cluster (memory in bytes, when
    every accelerator has the same; the host's as host_memory, as --memory and
    --host-memory split them)."""
    memory = {int(m) for m, d in zip(cluster.memory, cluster.devices) if not d.host_tier}
    host = {int(m) for m, d in zip(cluster.memory, cluster.devices) if d.host_tier}
    return place_inputs(os.path.join(str(directory), "profile"), devices,
                        str(memory.pop()) if len(memory) == 1 else None, cluster.reserve,
                        algorithm=algorithm, time_budget=time_budget,
                        host_memory=str(host.pop()) if len(host) == 1 else None)


def _devices(placed) -> dict:
    """Node name -> the local device name of its placed device."""
    names = placed.placement.cluster.names
    return {node: local_device(names[d]) for node, d in zip(placed.graph.names, placed.placement.device)}


def _budget(time_budget):
    if time_budget is None:
        return None
    if isinstance(time_budget, bool) or not isinstance(time_budget, (int, float)) \
            or not 0 < time_budget * 1e6 <= MAX_TIME_US:
        raise UserError(f"time_budget: give seconds, more than 0 and at most a day; got {time_budget!r}")
    return float(time_budget)

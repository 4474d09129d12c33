"""Train a placed graph: what `pardnn run PLACED_DIR --steps N` does.

A placed dir holds placed_graph.pb and the profile.json of the profile it was
placed from (`pardnn place` copies it there). profile.json names the model family
(or the user's script, by absolute path) and its knobs, so the model is rebuilt
only to get its feed function; the graph that trains is the imported placed
GraphDef, in a session with as many virtual CPU devices as the placement uses.
Step i is fed feed(i), as in an unplaced run from the same initial state, so the
losses of the two can be compared step by step.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass

import pardnn.tf.quiet_import  # noqa: F401  (first: hides TensorFlow's start-up lines)
import tensorflow as tf

from pardnn.base.errors import UserError
from pardnn.models import MAX_RUN_STEPS, build_model, script_errors
from pardnn.tf.graphdef import read_graph_def
from pardnn.tf.rewrite import PlacementCheck, check_placement, import_placed_graph
from pardnn.tf.session import SESSION_CONFIGS
from pardnn.tf.step_trace import measured_step

tf1 = tf.compat.v1


@dataclass
class RunResult:
    losses: list
    check: PlacementCheck
    trace: list = None          # trace events of the last step (pardnn.tf.step_trace), if asked


def train(session, train_op, loss, feed, steps: int, start: int = 0) -> list:
    """Run `steps` training steps fed feed(start), feed(start+1), ...; the losses."""
    losses = []
    for step in range(start, start + steps):
        _, value = session.run([train_op, loss], feed_dict=feed(step) if feed else None)
        losses.append(float(value))
    return losses


def run_placed(placed_dir, load_module, steps: int, config: str = "pardnn", trace: bool = False) -> RunResult:
    """Import placed_dir/placed_graph.pb into a fresh graph and train `steps` steps of
    the model the profile names (`load_module`: a model's name to its module, as
    pardnn_builtin_models.load_module, which sits above pardnn.tf)
    in a session with `config` ("pardnn": rewrites off, soft placement on;
    "default": TF's default ConfigProto, Grappler on); the first step also checks
    where TF ran each node. With `trace`, the last step is traced too and the
    result holds it as trace events."""
    if not 1 <= steps <= MAX_RUN_STEPS:
        raise UserError(f"--steps: need 1 to {MAX_RUN_STEPS} steps, got {steps}")
    if config not in SESSION_CONFIGS:
        raise UserError(f"--config: expected {' or '.join(SESSION_CONFIGS)}, got {config!r}")
    doc = _profile_doc(placed_dir)
    module = load_module(doc["model"])
    model = build_model(module, doc["model"], doc.get("knobs", {}))
    graph_def = read_graph_def(os.path.join(str(placed_dir), "placed_graph.pb"))
    with script_errors(module, doc["model"]):
        return _run(graph_def, model, steps, config, trace, doc["model"])


def _run(graph_def, model, steps, config, trace, name):
    """run_placed's session: the placed graph imported, trained and checked."""
    cpus, gpus = device_counts(graph_def)
    graph = tf.Graph()
    with graph.as_default():
        import_placed_graph(graph_def)
    shape = graph.get_tensor_by_name(model.loss).shape
    if shape.rank is not None and shape.num_elements() != 1:
        raise UserError(f"MODEL: {name}: the loss {model.loss!r} has shape {shape.as_list()}; "
                        f"`pardnn run` prints one loss per step: give a scalar")
    with tf1.Session(graph=graph, config=SESSION_CONFIGS[config](cpus, gpus)) as session:
        session.run(model.init)
        feed0 = model.feed(0) if model.feed else None
        (_, first), check = check_placement(session, [model.train_op, model.loss], feed0, graph_def)
        traced = trace and steps > 1
        losses = [float(first)] + train(session, model.train_op, model.loss, model.feed,
                                        steps - 1 - traced, start=1)
        metadata = check.run_metadata
        if traced:
            last, metadata = _traced_step(session, model, steps - 1)
            losses.append(last)
    return RunResult(losses, check, measured_step(metadata) if trace else None)


def _traced_step(session, model, step):
    """(loss, RunMetadata) of training step `step`, run with a full trace."""
    metadata = tf1.RunMetadata()
    _, loss = session.run([model.train_op, model.loss], feed_dict=model.feed(step) if model.feed else None,
                          options=tf1.RunOptions(trace_level=tf1.RunOptions.FULL_TRACE), run_metadata=metadata)
    return float(loss), metadata


def device_counts(graph_def):
    """(virtual CPU devices needed, whether any GPU is asked for) by a placed graph."""
    cpus, gpus = 1, False
    for device in {n.device for n in graph_def.node}:
        match = re.search(r"device:(CPU|GPU):([0-9]+)$", device, re.IGNORECASE)
        if match and match.group(1).upper() == "CPU":
            cpus = max(cpus, int(match.group(2)) + 1)
        gpus |= bool(match) and match.group(1).upper() == "GPU"
    return cpus, gpus


def _profile_doc(placed_dir):
    path = os.path.join(str(placed_dir), "profile.json")
    if not os.path.isdir(str(placed_dir)):
        raise UserError(f"PLACED_DIR: {placed_dir} is not a directory")
    try:
        with open(path) as f:
            doc = json.load(f)
    except FileNotFoundError:
        raise UserError(f"{path}: missing; `pardnn run` needs a placement of a profile made by "
                        f"`pardnn profile` (use pardnn.tf.import_placed_graph in your own script)") from None
    except (OSError, ValueError) as exc:
        raise UserError(f"{path}: not readable JSON ({exc})") from None
    if doc.get("api") == "profile_function":
        raise UserError(f"{path}: a TF2 step's plan (pardnn.tf.profile_function); train it in your own "
                        f"script with pardnn.tf.variables_placed and pardnn.tf.placed (docs/tf2.md)")
    if "model" not in doc:
        raise UserError(f"{path}: names no model (profiled through the Python API?); "
                        f"train it with pardnn.tf.import_placed_graph in your own script")
    return doc

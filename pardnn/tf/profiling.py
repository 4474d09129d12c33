"""Profile a TF1-style training graph: run it, trace S steps, write a profile dir.

`profile(session, fetches, feed, steps, out_dir)` is the public API for a user's
own training script; `profile_model(model, steps, devices, out_dir)` profiles a
`pardnn.models.Model` (what `pardnn profile` does). Both run one untraced warm-up
step (first-run allocation and kernel set-up would skew the times), then `steps`
steps traced with RunOptions(trace_level=FULL_TRACE). Each step really trains: the
fetches (typically the train op) run steps + 1 times.

The profile dir (docs/profiles.md), written all or nothing:
  graph.pb              session.graph.as_graph_def(add_shapes=True) — with the
                        `_output_shapes` the loader uses for tensors nobody timed
  run_metadata_<i>.pb   one serialized RunMetadata per traced step, i = 0..S-1
  profile.json          TF version, devices, date, steps, fetch and feed names, plus
                        what the caller records (model family, knobs, op names),
                        and `cpu_only_ops`, `gpu_only_ops` (pardnn.tf.op_defs)
  op_defs.pb            the OpDefs of graph.pb's op types (pardnn.tf.op_defs), so
                        reading the profile needs no TensorFlow
"""

from __future__ import annotations

import datetime

import pardnn.tf.quiet_import  # noqa: F401  (first: hides TensorFlow's start-up lines)
import tensorflow as tf

from pardnn.base.errors import UserError
from pardnn.io.outputs import OutputDir
from pardnn.base.jsonfile import write_json
import pardnn.tf.op_defs as op_defs
from pardnn.tf.session import parse_profile_devices, session_config

tf1 = tf.compat.v1
WARMUP_STEPS = 1


def profile(session, fetches, feed=None, steps: int = 5, out_dir: str = "profile", meta=None) -> dict:
    """Trace `steps` steps of `session.run(fetches, feed)` into `out_dir`.

    feed: None, a feed dict, or a function step -> feed dict (step 0 is the
    warm-up, 1..steps the traced steps). meta: extra fields for profile.json.
    Returns the profile.json contents."""
    if steps < 1:
        raise UserError(f"--steps: need at least 1 traced step, got {steps}")
    feed_fn = feed if callable(feed) else (lambda step: feed)
    metas = traced_steps(session, fetches, feed_fn, steps)
    doc = _describe(session, fetches, feed_fn(WARMUP_STEPS), steps, meta or {})
    write_profile_dir(out_dir, session.graph, metas, doc)
    return doc


def traced_steps(session, fetches, feed_fn, steps: int) -> list:
    """Run WARMUP_STEPS untraced steps, then `steps` traced ones; their RunMetadata."""
    for step in range(WARMUP_STEPS):
        session.run(fetches, feed_dict=feed_fn(step))
    metas = []
    options = tf1.RunOptions(trace_level=tf1.RunOptions.FULL_TRACE)
    for step in range(WARMUP_STEPS, WARMUP_STEPS + steps):
        run_metadata = tf1.RunMetadata()
        session.run(fetches, feed_dict=feed_fn(step), options=options, run_metadata=run_metadata)
        metas.append(run_metadata)
    return metas


def write_profile_dir(out_dir, graph, run_metadatas, doc) -> None:
    """graph.pb (of `graph`, a tf.Graph or a GraphDef), run_metadata_<i>.pb,
    op_defs.pb and profile.json, all or nothing; adds `cpu_only_ops` and
    `gpu_only_ops` to `doc`.

    The folder is replaced as a whole (pardnn.io.outputs), so run_metadata files of
    an earlier, longer profile never mix with this one's steps."""
    graph_def = graph if isinstance(graph, tf1.GraphDef) else graph.as_graph_def(add_shapes=True)
    op_list, doc["cpu_only_ops"] = op_defs.record(n.op for n in graph_def.node)
    doc["gpu_only_ops"] = op_defs.gpu_only_ops(n.op for n in graph_def.node)
    with OutputDir(out_dir) as out:
        with open(out.temp("graph.pb"), "wb") as f:
            f.write(graph_def.SerializeToString())
        with open(out.temp(op_defs.OP_DEFS_FILE), "wb") as f:
            f.write(op_list)
        for i, run_metadata in enumerate(run_metadatas):
            with open(out.temp(f"run_metadata_{i}.pb"), "wb") as f:
                f.write(run_metadata.SerializeToString())
        write_json(doc, out.temp("profile.json"))


def profile_model(model, steps: int = 5, devices: str = "cpu:1", out_dir: str = "profile",
                  meta=None, rewrites: bool = False) -> dict:
    """Profile a pardnn.models.Model: initialise, then `profile` its train op and loss
    on `devices` ("cpu:K" virtual CPU devices, or "gpu" for the visible GPUs), with
    Grappler's rewrites on if `rewrites` (the loader spreads fused nodes' times)."""
    cpu_devices, gpus = parse_profile_devices(devices)
    config = session_config(cpu_devices, gpus, rewrites)
    with tf1.Session(graph=model.graph, config=config) as session:
        session.run(model.init)
        return profile(session, [model.train_op, model.loss], model.feed, steps, out_dir, meta={
            "train_op": model.train_op, "loss": model.loss, "init": model.init,
            "seed": model.seed, "profile_devices": devices, "rewrites": "on" if rewrites else "off",
            **(meta or {})})


def _describe(session, fetches, feed, steps, meta):
    fetch_list = fetches if isinstance(fetches, (list, tuple)) else [fetches]
    return {
        "tf_version": tf.__version__,
        "devices": [d.name for d in session.list_devices()],
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "steps": steps,
        "warmup_steps": WARMUP_STEPS,
        "fetches": [getattr(x, "name", str(x)) for x in fetch_list],
        "feeds": sorted(getattr(k, "name", str(k)) for k in (feed or {})),
        **meta,
    }

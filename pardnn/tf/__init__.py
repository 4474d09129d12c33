"""The TensorFlow side of pardnn: profiling, loading profiles, placed graphs.

TensorFlow is imported here, in the Keras API above it (pardnn.keras) and in the
model scripts (pardnn.models, pardnn_builtin_models), nowhere else.
Public API for a user's own TF1-style training script:

    pardnn.tf.profile(session, fetches, feed, steps=5, out_dir=...)   profile dir
    pardnn.tf.load_profile(path) -> (CostGraph, info)
    pardnn.tf.import_placed_graph(path_or_graph_def, name="")          placed graph
    pardnn.tf.check_placement(session, fetches, feed_dict)            TF honoured it?

and for a TF2 tf.function training step (docs/tf2.md):

    pardnn.tf.profile_function(step_fn, args, steps=5, out_dir=...)   profile dir
    pardnn.tf.profile_function(step_fn, specs, estimate="dgx-h100")  planned, nothing run
    with pardnn.tf.shape_only_variables(): build()                    model without memory
    with pardnn.tf.variables_placed("placed/placement.csv"): build()  variables as planned
    pardnn.tf.placed(step_fn, "placed/placement.csv")                 placed tf.function

estimated profiles of a Model (docs/estimates.md) and clusters of several hosts
(docs/multihost.md):

    pardnn.tf.estimate_model(model, pardnn.tf.gpu_target("dgx-a100"), "prof")
    with pardnn.tf.open_session(cluster, graph) as session: ...       checks every device
    pardnn.tf.loopback_cluster(tasks=2, cpus=2)                       servers in this process

TensorFlow is imported (quietly) on first use of this API, not by importing the
package: `pardnn place`, `emulate` and `compare` read profiles through
pardnn.tf.profile_loader, which needs only protobuf (pardnn.tf.protos), so they
never pay TensorFlow's start-up.
"""

import importlib

# Public name -> the module defining it (imported by name on first use; tests/test_layout.py
# reads these strings as imports).
_API = {
    "profile": "pardnn.tf.profiling", "profile_model": "pardnn.tf.profiling",
    "load_profile": "pardnn.tf.profile_loader",
    "import_placed_graph": "pardnn.tf.rewrite", "check_placement": "pardnn.tf.rewrite",
    "write_placed_graph": "pardnn.tf.placed_graph",
    "session_config": "pardnn.tf.session",
    "profile_function": "pardnn.tf.function", "placed": "pardnn.tf.function", "check_function_placement": "pardnn.tf.function",
    "check_nested_placement": "pardnn.tf.function",
    "variables_placed": "pardnn.tf.variables", "shape_only_variables": "pardnn.tf.variables",
    "estimate_model": "pardnn.tf.estimate", "gpu_target": "pardnn.tf.estimate",
    "open_session": "pardnn.tf.distributed", "loopback_cluster": "pardnn.tf.distributed",
}
__all__ = sorted(_API)


def __getattr__(name):
    if name not in _API:
        raise AttributeError(f"module 'pardnn.tf' has no attribute {name!r}")
    return getattr(importlib.import_module(_API[name]), name)

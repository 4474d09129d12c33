"""The TensorFlow side of pardnn: profiling, loading profiles, placed graphs.

This package (and pardnn.models) is the only place TensorFlow is imported.
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

Note: `pardnn.tf.profile` is the function; the module is pardnn.tf.profile's
namesake, reachable as `from pardnn.tf.profile import profile_model`.
"""

import os
import sys


def _import_tensorflow_quietly():
    """Import TensorFlow with file descriptor 2 sent to /dev/null: its C++ start-up
    lines (oneDNN notice, CUDA probes, CPU features) are printed before its log level
    applies and would bury pardnn's own one-line messages. Later C++ logs below
    ERROR are hidden by TF_CPP_MIN_LOG_LEVEL=2 unless the user set it."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "wb") as null:
            os.dup2(null.fileno(), 2)
            import tensorflow  # noqa: F401
    finally:
        os.dup2(saved, 2)
        os.close(saved)


_import_tensorflow_quietly()

from pardnn.tf.profile_loader import load_profile  # noqa: E402
from pardnn.tf.profile import profile, profile_model  # noqa: E402
from pardnn.tf.rewrite import check_placement, import_placed_graph, write_placed_graph  # noqa: E402
from pardnn.tf.session import session_config  # noqa: E402
from pardnn.tf.function import (check_function_placement, check_nested_placement, placed,  # noqa: E402
                                profile_function)
from pardnn.tf.variables import shape_only_variables, variables_placed  # noqa: E402

__all__ = ["profile", "profile_model", "load_profile", "import_placed_graph",
           "check_placement", "write_placed_graph", "session_config",
           "profile_function", "placed", "check_function_placement", "check_nested_placement",
           "variables_placed", "shape_only_variables"]

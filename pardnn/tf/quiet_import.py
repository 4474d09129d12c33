"""Importing this module imports TensorFlow with its start-up lines hidden.

Every module of pardnn.tf that uses TensorFlow imports this one first. TensorFlow's
C++ start-up lines (oneDNN notice, CUDA probes, CPU features) are printed before its
log level applies and would bury pardnn's own one-line messages, so file descriptor
2 goes to /dev/null while it loads. Later C++ logs below ERROR are hidden by
TF_CPP_MIN_LOG_LEVEL=2 unless the user set it.

OR-Tools' CP-SAT (pardnn's exact candidate) crashes in a process that imported
TensorFlow before it (google/or-tools#3230), and works when imported first; so it is
imported first here, and the exact candidate then solves in the same process
(pardnn.placers.exact) instead of a fresh interpreter.
"""

import os
import sys

if "tensorflow" not in sys.modules:
    import ortools.sat.python.cp_model  # noqa: F401  (before TensorFlow, see above)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    sys.stderr.flush()
    _saved = os.dup(2)
    try:
        with open(os.devnull, "wb") as _null:
            os.dup2(_null.fileno(), 2)
            import tensorflow  # noqa: F401
    finally:
        os.dup2(_saved, 2)
        os.close(_saved)

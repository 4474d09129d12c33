"""Keras' object names, made a function of the build alone.

Keras names a layer, model, metric or seed generator from one process-wide counter
per prefix (`dense`, `dense_1`, ...), and TensorFlow names a traced step's ops after
them (`sequential/dense_1/MatMul`), so a model built a second time in one process
traces ops of other names. pardnn.keras builds the plan's model, and the model in
`plan.scope()`, each with counters of its own that start at zero (`KerasNames`), and
traces their steps with the same counters: the names come out the same in any
process, whatever was built before, and no `keras.backend.clear_session()` is needed.
Variables are matched to the plan by keys of their own (pardnn.keras.keys), not by
these names.
"""

from __future__ import annotations

import collections
import contextlib

try:
    from keras.src.backend.common import global_state
except ImportError as exc:          # Keras 2 (TensorFlow before 2.16) has no such module
    raise ImportError("pardnn.keras needs Keras 3 (TensorFlow 2.16 and later install it)") from exc

_COUNTERS = "object_name_uids"      # keras.src.utils.naming.get_uid's global attribute
_SEEDS = "global_seed_generator"    # keras.src.random.seed_generator's: unseeded random ops draw from it


class KerasNames:
    """Keras' name counters of one build, and its global seed generator: `with
    names.active():` swaps them in for the process-wide ones, and back on leaving.

    The generator is Keras' for random ops given no seed (ConvNeXt's stochastic
    depth): created lazily, with a variable, on the first trace that draws from it.
    Each build has its own, so that the plan's build, the scope's and the placed
    step's traces create and read their own variable (the plan's, on its planned
    device), never one an unplaced model made earlier in the process, nor a plan's
    shape-only one."""

    def __init__(self):
        self.counters = collections.defaultdict(int)
        self.seeds = None

    @contextlib.contextmanager
    def active(self):
        saved = global_state.get_global_attribute(_COUNTERS), global_state.get_global_attribute(_SEEDS)
        global_state.set_global_attribute(_COUNTERS, self.counters)
        global_state.set_global_attribute(_SEEDS, self.seeds)
        try:
            yield self
        finally:
            self.seeds = global_state.get_global_attribute(_SEEDS)
            global_state.set_global_attribute(_COUNTERS, saved[0])
            global_state.set_global_attribute(_SEEDS, saved[1])

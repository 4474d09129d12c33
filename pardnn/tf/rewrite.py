"""Placed GraphDefs in TensorFlow: import one, and check that TF honoured it.

(pardnn.tf.placed_graph writes them, without TensorFlow.) `check_placement` runs
a step with RunOptions(output_partition_graphs=True) and compares where each node
of the graph ran with where it was asked to run. Nodes TF
adds (send/recv, replicated constants, _Arg/_Retval) are not counted; nodes the
step does not need (initialisers) do not run and are not counted either.
"""

from __future__ import annotations

import functools
import os
from collections import Counter
from dataclasses import dataclass, field

import pardnn.tf.quiet_import  # noqa: F401  (first: hides TensorFlow's start-up lines)
import tensorflow as tf

from pardnn.tf.allocations import HOST, step_peaks
from pardnn.tf.graphdef import read_graph_def
from pardnn.tf.protos import to_tensorflow

tf1 = tf.compat.v1


def import_placed_graph(path_or_graph_def, name="", input_map=None, return_elements=None):
    """Import a placed GraphDef (a path or a GraphDef) into the default graph.

    With the default name="" the ops keep their original names, so the train op,
    loss and feeds of the profiled model are found under the same names. Returns
    what tf.compat.v1.import_graph_def returns for `return_elements`."""
    graph_def = path_or_graph_def
    if isinstance(path_or_graph_def, (str, os.PathLike)):
        graph_def = read_graph_def(path_or_graph_def)
    if not isinstance(graph_def, tf1.GraphDef):
        graph_def = to_tensorflow(graph_def, tf1.GraphDef)
    return tf1.import_graph_def(graph_def, input_map=input_map,
                                return_elements=return_elements, name=name)


@dataclass
class PlacementCheck:
    """Where the nodes of one step ran, and which TF moved from their request."""

    nodes_per_device: dict = field(default_factory=dict)
    moved: list = field(default_factory=list)     # (node, requested, actual)
    step_peak_bytes: dict = field(default_factory=dict)   # device: peak allocated in the step
    run_metadata: object = None                           # the traced step's RunMetadata

    @property
    def num_run(self) -> int:
        return sum(self.nodes_per_device.values())


def check_placement(session, fetches, feed_dict=None, graph_def=None):
    """Run `fetches` once, traced, asking for partition graphs; returns (results,
    PlacementCheck), with what each device allocated during the run
    (pardnn.tf.allocations).

    The requested devices are those in `graph_def` (default: the session's graph)."""
    requested = {n.name: n.device for n in (graph_def or session.graph.as_graph_def()).node}
    run_metadata = tf1.RunMetadata()
    options = tf1.RunOptions(output_partition_graphs=True, trace_level=tf1.RunOptions.FULL_TRACE)
    results = session.run(fetches, feed_dict=feed_dict, run_metadata=run_metadata, options=options)
    check = compare_partitions(requested, run_metadata.partition_graphs)
    check.step_peak_bytes = {d if d == HOST else _canonical(d): peak
                             for d, peak in step_peaks(run_metadata.step_stats).items()}
    check.run_metadata = run_metadata
    return results, check


def compare_partitions(requested: dict, partition_graphs) -> PlacementCheck:
    """PlacementCheck of partition graphs against node name -> requested device.
    A partial request ("/device:CPU:1") is honoured by any device matching it."""
    ran = Counter()
    moved = []
    for partition in partition_graphs:
        for node in partition.node:
            want = requested.get(node.name)
            if want is None:
                continue
            actual = _canonical(node.device)
            ran[actual] += 1
            if want and not _honours(actual, want):
                moved.append((node.name, want, actual))
    return PlacementCheck(dict(sorted(ran.items())), moved)


@functools.lru_cache(maxsize=1024)
def _canonical(name: str) -> str:
    """The full canonical form of a device name (memoised: few distinct names)."""
    return tf.DeviceSpec.from_string(name).to_string()


@functools.lru_cache(maxsize=1024)
def _honours(actual: str, want: str) -> bool:
    """Whether device `actual` has every field the request `want` sets."""
    got, asked = tf.DeviceSpec.from_string(actual), tf.DeviceSpec.from_string(want)
    return all(getattr(asked, f) is None or getattr(asked, f) == getattr(got, f)
               for f in ("job", "replica", "task", "device_type", "device_index"))

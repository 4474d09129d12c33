"""Load the cost graph behind a PROFILE argument: a profile directory (GraphDef plus
RunMetadata, read by pardnn.tf.profile_loader) or a CostGraph JSON file.

TensorFlow is imported only when a profile directory is read, so placing a JSON
cost graph never loads it.
"""

import os
import sys

import numpy as np

from pardnn.base.errors import UserError
from pardnn.graph import CostGraph


def load_cost_graph(path):
    """(CostGraph, info) for a profile dir or a cost graph JSON file.

    info is a dict of loader statistics (e.g. how many nodes had no timing);
    `info["profile_dir"]` is set when the input has a GraphDef to rewrite."""
    graph, info = _load(str(path))
    warn_big_group(graph, path)
    return graph, info


def _load(path):
    if os.path.isdir(path):
        from pardnn.tf.profile_loader import load_profile
        graph, info = load_profile(path)
        info["profile_dir"] = path
        return graph, info
    if os.path.isfile(path):
        if path.endswith(".pb"):
            raise UserError(f"PROFILE: {path} is a file; give the profile directory that holds it "
                            f"(graph.pb with run_metadata_<i>.pb) or a cost graph .json")
        return CostGraph.from_json(path), {}
    raise UserError(f"PROFILE: {path} does not exist (give a profile directory or a cost graph .json)")


def warn_big_group(graph, path) -> None:
    """A line on stderr when one colocation group holds more than half the nodes:
    they must all share one device, which is rarely what the user meant (a JSON
    file giving every node the same `group` label, say)."""
    if graph.num_groups == 0:
        return
    sizes = np.diff(graph.group_ptr)
    g = int(np.argmax(sizes))
    if sizes[g] > 1 and 2 * sizes[g] > graph.num_nodes:
        first = graph.names[int(graph.group_members(g)[0])]
        print(f"pardnn: warning: {path}: one colocation group (with node {first!r}) holds "
              f"{int(sizes[g])} of {graph.num_nodes} nodes; they all must share one device",
              file=sys.stderr)

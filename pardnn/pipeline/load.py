"""Load the cost graph behind a PROFILE argument: a profile directory (GraphDef plus
RunMetadata, read by pardnn.tf.profile_loader) or a CostGraph JSON file.

TensorFlow is imported only when a profile directory is read, so placing a JSON
cost graph never loads it.
"""

import os

from pardnn.errors import UserError
from pardnn.graph import CostGraph


def load_cost_graph(path):
    """(CostGraph, info) for a profile dir or a cost graph JSON file.

    info is a dict of loader statistics (e.g. how many nodes had no timing);
    `info["profile_dir"]` is set when the input has a GraphDef to rewrite."""
    path = str(path)
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

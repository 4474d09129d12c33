"""TensorFlow's protocol buffers without importing TensorFlow.

Reading a profile (graph.pb, run_metadata_<i>.pb) and writing placed_graph.pb only
parse and serialize protobufs, yet `import tensorflow` takes seconds. The
tensorboard package ships the same .proto schemas under its own protobuf package
name (`tensorboard.compat.proto`), importable in milliseconds, so `pardnn place`,
`emulate` and `compare` of a profile directory never load TensorFlow.

Messages made here are not instances of TensorFlow's classes: code that hands one
to TensorFlow converts it with `to_tensorflow` (same wire format, so a round trip
through bytes is exact).
"""

from __future__ import annotations

import numpy as np
from tensorboard.compat.proto import config_pb2, graph_pb2, op_def_pb2, types_pb2

GraphDef = graph_pb2.GraphDef
RunMetadata = config_pb2.RunMetadata
OpList = op_def_pb2.OpList
DT_RESOURCE = types_pb2.DT_RESOURCE

# Bytes per element by DataType enum, as tf.dtypes.as_dtype(t).size gives them
# (tests/test_tf_protos.py checks this table against TensorFlow). Strings,
# resources and variants have no fixed size (0): only the profile can tell theirs.
DTYPE_SIZE = np.zeros(100, np.int64)
DTYPE_SIZE[1:34] = [4, 8, 4, 1, 2, 1, 0, 8, 8, 1, 1, 1, 4, 2, 2, 2, 2, 16, 2, 0, 0,
                    4, 8, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1]


def to_tensorflow(message, tf_class):
    """`message` (a class of this module) as an instance of TensorFlow's `tf_class`."""
    return tf_class.FromString(message.SerializeToString())

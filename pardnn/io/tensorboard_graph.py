"""The placed graph as a TensorBoard log directory: `tensorboard --logdir OUT/tensorboard`
shows it in the Graphs dashboard, where "Color: Device" colours each op by the
device pardnn placed it on.

The log directory holds one event file (the TFRecord file of Event protos that
TF's summary writers write): a version event, then an Event whose graph_def is the
serialized placed GraphDef. A profile directory's placed_graph.pb is that GraphDef
already; a cost-graph JSON input, which has no GraphDef, gets one made of its nodes
(name, op type, placed device) and edges (data inputs "src:slot", control inputs
"^src"), enough for the picture. The file name and its wall times are fixed, so the
same placement writes the same bytes. Written with the tensorboard package's protos
and record writer, so TensorFlow is not imported.
"""

from __future__ import annotations

import os

import numpy as np
from tensorboard.compat.proto import event_pb2, graph_pb2
from tensorboard.summary.writer.record_writer import RecordWriter

EVENT_FILE = "events.out.tfevents.0.pardnn"


def graph_def_bytes(graph, device_names, device) -> bytes:
    """A serialized GraphDef of `graph` with node i on device_names[device[i]]."""
    graph_def = graph_pb2.GraphDef()
    devices = np.asarray(device_names, object)[np.asarray(device)].tolist()
    names, ops = graph.names, graph.ops
    pred_ptr = graph.pred_ptr.tolist()
    src = graph.pred_src.tolist()
    slot = graph.edge_slot[graph.pred_eid].tolist()
    for v in range(graph.num_nodes):
        lo, hi = pred_ptr[v], pred_ptr[v + 1]
        data = [names[src[i]] if slot[i] == 0 else f"{names[src[i]]}:{slot[i]}"
                for i in range(lo, hi) if slot[i] >= 0]
        control = [f"^{names[src[i]]}" for i in range(lo, hi) if slot[i] < 0]
        graph_def.node.add(name=names[v], op=ops[v] or "NoOp", device=devices[v], input=data + control)
    return graph_def.SerializeToString()


def write_graph_logdir(logdir, graph_def: bytes) -> None:
    """Make `logdir` (absent or empty) and write one event file holding `graph_def`."""
    os.makedirs(logdir, exist_ok=True)
    with open(os.path.join(logdir, EVENT_FILE), "wb") as f:
        writer = RecordWriter(f)
        writer.write(event_pb2.Event(wall_time=0.0, file_version="brain.Event:2").SerializeToString())
        writer.write(event_pb2.Event(wall_time=0.0, step=0, graph_def=graph_def).SerializeToString())
        writer.flush()


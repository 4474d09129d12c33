"""The placed graph as a TensorBoard log directory: `tensorboard --logdir OUT/tensorboard`
shows it in the Graphs dashboard, where "Color: Device" colours each op by the
device pardnn placed it on.

The log directory holds one event file (the TFRecord file of Event protos that
TF's summary writers write): a version event, then an Event whose graph_def is the
serialized placed GraphDef. A profile directory's placed_graph.pb is that GraphDef
already; a cost-graph JSON input, which has no GraphDef, gets one made of its nodes
(name, op type, placed device) and edges (data inputs "src:slot", control inputs
"^src"), enough for the picture. The file name and its wall times are fixed, so the
same placement writes the same bytes. Written with the tensorboard package's protos,
so TensorFlow is not imported; the records are framed here with google-crc32c's
checksum (compiled), as the tensorboard package's own record writer computes it in
pure Python: 9 s for the 27 MB GraphDef of a 200k-node graph.
"""

from __future__ import annotations

import os
import struct

import google_crc32c
import numpy as np
from tensorboard.compat.proto import event_pb2, graph_pb2

EVENT_FILE = "events.out.tfevents.0.pardnn"
_NODES_AT_ONCE = 10000


def graph_def_bytes(graph, device_names, device) -> bytes:
    """A serialized GraphDef of `graph` with node i on device_names[device[i]]. A
    GraphDef of nodes alone serializes as its nodes' records one after another, so it
    is serialized a batch of nodes at a time: a million NodeDefs never exist at once."""
    devices = np.asarray(device_names, object)[np.asarray(device)].tolist()
    names, ops = graph.names, graph.ops
    pred_ptr = graph.pred_ptr.tolist()
    src = graph.pred_src.tolist()
    slot = graph.edge_slot[graph.pred_eid].tolist()
    parts = []
    for start in range(0, graph.num_nodes, _NODES_AT_ONCE):
        graph_def = graph_pb2.GraphDef()
        for v in range(start, min(start + _NODES_AT_ONCE, graph.num_nodes)):
            lo, hi = pred_ptr[v], pred_ptr[v + 1]
            data = [names[src[i]] if slot[i] == 0 else f"{names[src[i]]}:{slot[i]}"
                    for i in range(lo, hi) if slot[i] >= 0]
            control = [f"^{names[src[i]]}" for i in range(lo, hi) if slot[i] < 0]
            graph_def.node.add(name=names[v], op=ops[v] or "NoOp", device=devices[v], input=data + control)
        parts.append(graph_def.SerializeToString())
    return b"".join(parts)


def write_graph_logdir(logdir, graph_def: bytes) -> None:
    """Make `logdir` (absent or empty) and write one event file holding `graph_def`."""
    os.makedirs(logdir, exist_ok=True)
    with open(os.path.join(logdir, EVENT_FILE), "wb") as f:
        write_record(f, event_pb2.Event(wall_time=0.0, file_version="brain.Event:2").SerializeToString())
        write_record(f, event_pb2.Event(wall_time=0.0, step=0, graph_def=graph_def).SerializeToString())


def write_record(f, data: bytes) -> None:
    """Write `data` framed as one TFRecord: its length (uint64, little-endian), the
    masked CRC-32C of the length, the data, the masked CRC-32C of the data."""
    length = struct.pack("<Q", len(data))
    f.write(length + _masked_crc(length))
    f.write(data)
    f.write(_masked_crc(data))


def _masked_crc(data: bytes) -> bytes:
    crc = google_crc32c.value(data)
    return struct.pack("<I", (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF)


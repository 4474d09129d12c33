"""The measured step as a trace (pardnn.tf.step_trace), from step stats made by hand:
tracks named like the emulated trace's, concurrent ops on extra "ops" threads,
GPU streams as threads of their device, memory from the allocation records."""

import json

import pytest

import pardnn.tf.quiet_import  # noqa: F401  (quiet TensorFlow import first)
from tensorflow.core.protobuf import config_pb2

from pardnn.io.trace_events import write_trace
from pardnn.tf.step_trace import measured_step
from helpers.trace_viewer import busy_us, names, read_trace

pytestmark = pytest.mark.tf
DEV = "/job:localhost/replica:0/task:0/device:"
EPOCH_US = 1_795_617_409_485_829          # a real step's clock: microseconds since 1970


def metadata(devices):
    """RunMetadata from {device: [(name, op, start_us, duration_us, [(alloc_us, bytes)])]}."""
    meta = config_pb2.RunMetadata()
    for device, records in devices.items():
        dev = meta.step_stats.dev_stats.add(device=device)
        for name, op, start, duration, allocations in records:
            ns = dev.node_stats.add(node_name=name, timeline_label=f"{name} = {op}(x)",
                                    all_start_nanos=round(start * 1000) + EPOCH_US * 1000,
                                    all_end_rel_nanos=int(duration * 1000))
            memory = ns.memory.add(allocator_name="cpu")
            for micros, nbytes in allocations:
                memory.allocation_records.add(alloc_micros=micros + EPOCH_US, alloc_bytes=nbytes)
    return meta


def test_tracks_lanes_streams_and_memory(tmp_path):
    meta = metadata({
        DEV + "CPU:10": [("late", "Add", 7, 1, [])],
        DEV + "CPU:2": [("a", "MatMul", 0, 4, [(0, 64), (4, -64)]), ("b", "Relu", 1, 2, [(1, 32)]),
                        ("c", "Add", 3.3, 1, []), ("d", "Add", 5, 1, [])],
        DEV + "GPU:0/stream:all": [("k", "Conv2D", 2, 3, [])],
    })
    path = tmp_path / "run.json"
    write_trace(path, measured_step(meta))
    doc = read_trace(path)        # also checks that no thread has overlapping events
    processes = names(doc, "process_name")
    assert [processes[i] for i in range(3)] == [DEV + "CPU:2", DEV + "CPU:10", DEV + "GPU:0"]
    threads = names(doc, "thread_name")
    ops = {e["name"]: (threads[e["pid"], e["tid"]], e["ts"], e["dur"], e["args"]["op"])
           for e in doc["traceEvents"] if e["ph"] == "X"}
    # b starts while a runs: second lane; c starts after b ended, before a did: second lane again
    assert ops == {"a": ("ops", 0, 4, "MatMul"), "b": ("ops 2", 1, 2, "Relu"), "c": ("ops 2", 3.3, 1, "Add"),
                   "d": ("ops", 5, 1, "Add"), "late": ("ops", 7, 1, "Add"), "k": ("stream:all", 2, 3, "Conv2D")}
    assert busy_us(doc) == {DEV + "CPU:2": 8, DEV + "CPU:10": 1}
    memory = [(e["ts"], e["args"]["bytes"]) for e in doc["traceEvents"] if e["ph"] == "C"]
    assert memory == [(0, 64), (1, 96), (4, 32)]
    assert json.loads(path.read_text())["displayTimeUnit"] == "ns"


def test_an_untraced_step_gives_no_events():
    assert measured_step(config_pb2.RunMetadata()) == []

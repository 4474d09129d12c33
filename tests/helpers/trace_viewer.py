"""Reading pardnn's step views back as the viewers do: a Chrome Trace Event file
checked against the format, and a TensorBoard server asked for the graph the way
its Graphs dashboard asks (imported by the tests; not a test module)."""

import json
import socket
import subprocess
import sys
import time
import urllib.request
from collections import defaultdict
from contextlib import contextmanager

from google.protobuf import text_format
from tensorboard.compat.proto import graph_pb2

REQUIRED = {"X": ("ph", "ts", "dur", "pid", "tid", "name"), "C": ("ph", "ts", "pid", "name", "args"),
            "M": ("ph", "pid", "name", "args"), "s": ("ph", "id", "ts", "pid", "tid"),
            "f": ("ph", "id", "ts", "pid", "tid")}


def read_trace(path) -> dict:
    """The trace file's JSON object, after checking it against the Trace Event format:
    each event's required fields by phase, numbers where numbers go, counters with
    numeric args, and complete events of one thread nested or disjoint (what a
    viewer can draw)."""
    doc = json.loads(open(path).read())
    assert isinstance(doc["traceEvents"], list) and doc["displayTimeUnit"] in ("ms", "ns")
    lanes = defaultdict(list)
    for event in doc["traceEvents"]:
        for key in REQUIRED[event["ph"]]:
            assert key in event, (key, event)
        for key in ("ts", "dur"):
            assert isinstance(event.get(key, 0), (int, float)) and event.get(key, 0) >= 0, event
        if event["ph"] == "C":
            assert event["args"] and all(isinstance(v, (int, float)) for v in event["args"].values())
        if event["ph"] == "X":
            lanes[event["pid"], event["tid"]].append((event["ts"], event["ts"] + event["dur"]))
    for spans in lanes.values():
        open_ends = []
        for start, end in sorted(spans, key=lambda s: (s[0], -s[1])):
            while open_ends and open_ends[-1] <= start + 1e-9:
                open_ends.pop()
            assert not open_ends or end <= open_ends[-1] + 1e-9, "events of one thread overlap"
            open_ends.append(end)
    return doc


def names(doc, what) -> dict:
    """{pid: name} of the processes, or {(pid, tid): name} of the threads."""
    key = {"process_name": lambda e: e["pid"], "thread_name": lambda e: (e["pid"], e["tid"])}[what]
    return {key(e): e["args"]["name"] for e in doc["traceEvents"] if e["ph"] == "M" and e["name"] == what}


def busy_us(doc) -> dict:
    """{process name: summed duration of its "ops" threads' events}."""
    process, thread = names(doc, "process_name"), names(doc, "thread_name")
    busy = defaultdict(float)
    for e in doc["traceEvents"]:
        if e["ph"] == "X" and thread.get((e["pid"], e["tid"]), "").split(" ")[0] == "ops":
            busy[process[e["pid"]]] += e["dur"]
    return dict(busy)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url, timeout=10):
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return response.read().decode()


@contextmanager
def tensorboard(logdir, log_path, wait_s=120):
    """A TensorBoard server on `logdir` at 127.0.0.1 (a free port), started as a user
    starts it (default loading), yielding its base URL once it answers; stopped on
    exit whatever happened."""
    port = _free_port()
    with open(log_path, "w") as log:
        server = subprocess.Popen([sys.executable, "-m", "tensorboard.main", "--logdir", str(logdir),
                                   "--host", "127.0.0.1", "--port", str(port)],
                                  stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + wait_s
        while True:
            assert server.poll() is None, f"tensorboard exited: {open(log_path).read()[-2000:]}"
            try:
                _get(f"{base}/data/runs", timeout=2)
                break
            except OSError:
                assert time.monotonic() < deadline, f"tensorboard did not answer in {wait_s} s"
                time.sleep(0.5)
        yield base
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def served_devices(base, wait_s=60) -> dict:
    """{node name: device} of the graph TensorBoard serves for run ".", fetched as the
    Graphs dashboard does (its run list, then the graph as text protobuf)."""
    deadline = time.monotonic() + wait_s
    while True:                      # the server loads event files after it starts answering
        info = json.loads(_get(f"{base}/data/plugin/graphs/info"))
        if info.get(".", {}).get("run_graph"):
            break
        assert time.monotonic() < deadline, f"no graph for run '.' in {info}"
        time.sleep(0.5)
    text = _get(f"{base}/data/plugin/graphs/graph?run=.&limit_attr_size=1024&large_attrs_key=_too_large_attrs")
    graph_def = text_format.Parse(text, graph_pb2.GraphDef())
    return {node.name: node.device for node in graph_def.node}

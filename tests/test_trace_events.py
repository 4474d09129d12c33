"""The step views without TensorFlow: the emulated step's critical path on hand-made
graphs, trace.json read back as a trace viewer does, and the placed graph of a cost
graph JSON served by a real TensorBoard (pardnn.io.trace_events,
pardnn.io.tensorboard_graph, pardnn.emulator.critical_path)."""

import csv
import json

import numpy as np
import pytest

from pardnn.cli import main
from pardnn.emulator.critical_path import critical_path
from pardnn.emulator.scheduler import simulate
from pardnn.graph import NORMAL, CostGraph
from pardnn.hardware import parse_devices
from pardnn.io.tensorboard_graph import write_record
from helpers.trace_viewer import busy_us, names, read_trace, served_devices, tensorboard


def graph(nodes, edges, nbytes=100):
    """nodes: {name: comp_us}; edges: (src, dst); every tensor `nbytes`."""
    return CostGraph.build(names=list(nodes), comp_us=list(nodes.values()), out_bytes=[nbytes] * len(nodes),
                           edge_src=[e[0] for e in edges], edge_dst=[e[1] for e in edges],
                           edge_bytes=[nbytes] * len(edges))


def path_of(g, device, latency=1.0, bandwidth=100.0):
    s = simulate(g, parse_devices("cpu:2").with_options(latency=latency, bandwidth=bandwidth), device)
    nodes, transfers = critical_path(g, device, s)
    return [g.names[i] for i in nodes], [g.names[g.edge_src[s.transfer_edge[t]]] for t in transfers]


def test_the_critical_path_follows_the_input_that_came_last_across_devices():
    # s on 0 feeds x (10 us, on 0) and y (20 us, on 1): y's result lands at 25, after x's at 11
    g = graph({"s": 1, "x": 10, "y": 20, "j": 1}, [("s", "x"), ("s", "y"), ("x", "j"), ("y", "j")])
    assert path_of(g, [0, 0, 1, 0]) == (["s", "y", "j"], ["s", "y"])
    # with y short, x's chain sets the step: no transfer on the path
    g = graph({"s": 1, "x": 10, "y": 2, "j": 1}, [("s", "x"), ("s", "y"), ("x", "j"), ("y", "j")])
    assert path_of(g, [0, 0, 1, 0]) == (["s", "x", "j"], [])


def test_the_critical_path_follows_the_device_when_the_inputs_waited():
    # a and b are independent on one device: b waits for the device, not for an input
    g = graph({"a": 5, "b": 3, "c": 1}, [("b", "c")])
    assert path_of(g, [0, 0, 0]) == (["a", "b", "c"], [])


@pytest.mark.parametrize("size", [0, 1, 1000, 100_000])
def test_event_records_are_framed_as_the_tensorboard_package_frames_them(size):
    import io
    from tensorboard.summary.writer.record_writer import RecordWriter
    data = np.random.default_rng(size).integers(0, 256, size, dtype=np.uint8).tobytes()
    buffer, ours = io.BytesIO(), io.BytesIO()
    RecordWriter(buffer).write(data)
    write_record(ours, data)
    assert ours.getvalue() == buffer.getvalue()


def test_written_in_pieces_the_views_are_the_bytes_written_whole(tmp_path, monkeypatch):
    # trace.json a slice of events at a time, the GraphDef a batch of nodes at a time
    from pardnn.io import tensorboard_graph, trace_events
    from tensorboard.compat.proto import graph_pb2
    rng = np.random.default_rng(3)
    n = 57
    pairs = sorted({(int(a), int(b)) for a, b in rng.integers(0, n, (120, 2)) if a < b})
    g = CostGraph.build(names=[f"n{i}" for i in range(n)], ops=["MatMul", ""] * 28 + ["Add"],
                        edge_src=[a for a, _ in pairs], edge_dst=[b for _, b in pairs],
                        edge_slot=rng.integers(-1, 3, len(pairs)))
    device = rng.integers(0, 3, n)
    events = [json.dumps({"ph": "X", "name": f"e{i}"}) for i in range(n)]
    whole = tensorboard_graph.graph_def_bytes(g, ["a", "b", "c"], device)
    trace_events.write_trace(tmp_path / "whole.json", events)
    monkeypatch.setattr(tensorboard_graph, "_NODES_AT_ONCE", 5)
    monkeypatch.setattr(trace_events, "_WRITE_SLICE", 4)
    assert tensorboard_graph.graph_def_bytes(g, ["a", "b", "c"], device) == whole
    trace_events.write_trace(tmp_path / "pieces.json", events)
    assert (tmp_path / "pieces.json").read_bytes() == (tmp_path / "whole.json").read_bytes()
    assert [e["name"] for e in json.loads((tmp_path / "pieces.json").read_text())["traceEvents"]] == \
        [f"e{i}" for i in range(n)]
    nodes = graph_pb2.GraphDef.FromString(whole).node
    assert [x.name for x in nodes] == list(g.names) and nodes[1].op == "NoOp"


@pytest.fixture(scope="module")
def placed(tmp_path_factory):
    """A 300-node fork-join cost graph placed by pardnn on cpu:3, and its emulation."""
    root = tmp_path_factory.mktemp("trace")
    rng = np.random.default_rng(1)
    n = 300
    src = [0] * 40 + list(range(1, 41)) + list(range(41, n - 1))
    dst = list(range(1, 41)) + [41] * 40 + list(range(42, n))
    g = CostGraph.build(names=[f"layer{i // 10}/op{i}" for i in range(n)], ops=["MatMul", "Relu"] * (n // 2),
                        comp_us=rng.uniform(5, 50, n), out_bytes=rng.integers(1_000, 100_000, n),
                        kind=[NORMAL] * n, edge_src=src, edge_dst=dst,
                        edge_bytes=rng.integers(1_000, 100_000, len(src)))
    g.to_json(root / "g.json")
    assert main(["place", str(root / "g.json"), "--devices", "cpu:3", "-o", str(root / "placed")]) == 0
    assert main(["emulate", str(root / "g.json"), "--placement", str(root / "placed" / "placement.csv"),
                 "--devices", "cpu:3", "--trace", str(root / "emu.json"), "--report", str(root / "emu_report.json")]) == 0
    return root


def test_place_writes_trace_and_tensorboard_into_its_output_folder(placed):
    out = placed / "placed"
    assert sorted(p.name for p in out.iterdir()) == [".pardnn-output.json", "inputs.json", "placement.csv", "report.json",
                                                     "tensorboard", "trace.json"]
    assert json.loads((out / ".pardnn-output.json").read_text())["files"] == [
        "inputs.json", "placement.csv", "report.json", "tensorboard", "trace.json"]
    place_events = read_trace(out / "trace.json")["traceEvents"]
    assert place_events == read_trace(placed / "emu.json")["traceEvents"]


def test_the_trace_has_a_track_per_device_and_link_and_the_report_busy_times(placed):
    doc = read_trace(placed / "emu.json")
    report = json.loads((placed / "emu_report.json").read_text())
    processes = names(doc, "process_name")
    assert [processes[d] for d in range(3)] == report["devices"] and processes[3] == "links"
    assert {names(doc, "thread_name")[d, 0] for d in range(3)} == {"ops"}
    busy = busy_us(doc)
    for d, name in enumerate(report["devices"]):
        assert busy.get(name, 0.0) == pytest.approx(report["busy_us"][d], rel=1e-3)
    events = doc["traceEvents"]
    ops = [e for e in events if e["ph"] == "X" and e["pid"] < 3]
    assert len(ops) == report["num_nodes"] and {e["args"]["op"] for e in ops} == {"MatMul", "Relu"}
    transfers = [e for e in events if e["ph"] == "X" and e["pid"] == 3]
    assert transfers and all(e["args"]["bytes"] > 0 and e["args"]["arrival"] >= e["ts"] for e in transfers)
    assert {names(doc, "thread_name")[3, e["tid"]] for e in transfers} <= {
        f"CPU:{a} -> CPU:{b}" for a in range(3) for b in range(3) if a != b}
    for d in range(3):
        memory = [e["args"]["bytes"] for e in events if e["ph"] == "C" and e["pid"] == d]
        assert memory and max(memory) == report["peak_memory_bytes"][d]


def test_the_critical_path_is_marked_from_the_start_to_the_end_of_the_step(placed):
    doc = read_trace(placed / "emu.json")
    report = json.loads((placed / "emu_report.json").read_text())
    chain = sorted((e for e in doc["traceEvents"] if e["ph"] == "X" and e["pid"] < 3
                    and e["args"].get("critical_path")), key=lambda e: e["ts"])
    assert chain[0]["ts"] == 0
    assert chain[-1]["ts"] + chain[-1]["dur"] == pytest.approx(report["makespan_us"], abs=2e-3)
    for before, after in zip(chain, chain[1:]):        # no gap the chain does not explain
        assert after["ts"] >= before["ts"] + before["dur"] - 2e-3
    flows = [e for e in doc["traceEvents"] if e["ph"] in "sf"]
    assert len(flows) == 2 * (len(chain) - 1)


def test_tensorboard_serves_the_placed_graph_of_a_cost_graph_json(placed, tmp_path):
    out = placed / "placed"
    with open(out / "placement.csv") as f:
        placement = {row["node"]: row["device"] for row in csv.DictReader(f)}
    with tensorboard(out / "tensorboard", tmp_path / "tensorboard.log") as base:
        served = served_devices(base)
    assert served == placement and len(set(served.values())) >= 2


@pytest.mark.parametrize("command, target, needle", [
    ("emulate", "nope/t.json", "directory of"),
    ("emulate", "", "is a directory"),
    ("emulate", "g.json", "would overwrite or go into the input"),
    ("run", "nope/t.json", "directory of"),
    ("run", "placed/run.json", "would overwrite or go into the input"),
])
def test_a_bad_trace_path_exits_2_before_any_work(placed, capsys, command, target, needle):
    before = {p: p.read_bytes() for p in placed.rglob("*") if p.is_file()}
    argv = (["emulate", str(placed / "g.json"), "--placement", str(placed / "placed" / "placement.csv"),
             "--devices", "cpu:3"] if command == "emulate" else ["run", str(placed / "placed")])
    capsys.readouterr()
    assert main(argv + ["--trace", str(placed / target)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--trace: " in err and str(placed / target) in err and needle in err, err
    assert {p: p.read_bytes() for p in placed.rglob("*") if p.is_file()} == before

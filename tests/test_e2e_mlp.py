"""End to end on stock TF: profile mlp on cpu:1, place on cpu:4, train the placed graph
on 4 virtual CPU devices with the losses of the unplaced run; the emulated and the
measured step as traces, and the placed graph in TensorBoard."""

import csv
import json

import pytest

import pardnn.tf.quiet_import  # noqa: F401  (quiet TensorFlow import first)
import tensorflow as tf

from pardnn.cli import main
from pardnn_builtin_models import load_module
from pardnn.tf import check_placement, import_placed_graph, session_config
from pardnn.tf.run import train
from helpers.trace_viewer import busy_us, names, read_trace, served_devices, tensorboard

pytestmark = [pytest.mark.slow, pytest.mark.tf]
tf1 = tf.compat.v1
STEPS = 3


@pytest.fixture(scope="module", params=["round-robin", "pardnn"])
def placed(tmp_path_factory, request):
    root = tmp_path_factory.mktemp("e2e")
    assert main(["profile", "mlp", "--size", "tiny", "--devices", "cpu:1", "--steps", "2",
                 "-o", str(root / "prof")]) == 0
    assert main(["place", str(root / "prof"), "--devices", "cpu:4", "--algorithm", request.param,
                 "-o", str(root / "placed")]) == 0
    return root / "placed"


def _unplaced_losses(model):
    with tf1.Session(graph=model.graph, config=session_config(1)) as session:
        session.run(model.init)
        return train(session, model.train_op, model.loss, model.feed, STEPS)


def test_placed_graph_trains_on_four_devices_like_the_unplaced_one(placed):
    assert {p.name for p in placed.iterdir()} == {".pardnn-output.json", "inputs.json", "placement.csv", "placed_graph.pb",
                                                  "report.json", "profile.json", "trace.json", "tensorboard"}
    report = json.loads((placed / "report.json").read_text())
    algorithm = report["algorithm"]
    assert report["loader"]["steps"] == 2 and 0 <= report["loader"]["untimed_nodes"] < report["num_nodes"]
    model = load_module("mlp").build(**json.loads((placed / "profile.json").read_text())["knobs"])
    expected = _unplaced_losses(model)

    graph = tf.Graph()
    with graph.as_default():
        import_placed_graph(str(placed / "placed_graph.pb"))
    with tf1.Session(graph=graph, config=session_config(4)) as session:
        session.run(model.init)
        (_, first), check = check_placement(session, [model.train_op, model.loss], model.feed(0))
        losses = [float(first)] + train(session, model.train_op, model.loss, model.feed, STEPS - 1, start=1)

    ran = [count for count in check.nodes_per_device.values() if count > 0]
    assert len(ran) >= 2                      # a placer that used one device fails here
    if algorithm == "round-robin":            # pardnn may rightly leave a device idle
        assert len(ran) == 4
    assert check.moved == []
    assert losses == pytest.approx(expected, abs=1e-5)
    assert expected[0] != expected[-1]                 # it trained


def test_run_command_prints_losses_devices_and_moves(placed, capsys):
    assert main(["run", str(placed), "--steps", str(STEPS)]) == 0
    out = capsys.readouterr().out
    assert out.count("loss ") == STEPS
    assert sum(f"device:CPU:{k}: " in out for k in range(4)) >= 2
    assert out.count(": peak ") >= 2                    # memory each device allocated
    assert "moved from their requested device: 0" in out


def test_run_trace_opens_beside_the_emulated_one(placed, tmp_path, capsys):
    trace = tmp_path / "run.json"
    assert main(["run", str(placed), "--steps", "2", "--trace", str(trace)]) == 0
    assert f"wrote {trace}: step 1" in capsys.readouterr().out
    measured, emulated = read_trace(trace), read_trace(placed / "trace.json")
    report = json.loads((placed / "report.json").read_text())
    assert set(busy_us(emulated)) <= set(report["devices"])
    assert busy_us(emulated) == pytest.approx({d: b for d, b in zip(report["devices"], report["busy_us"]) if b},
                                              rel=1e-3)
    devices = names(measured, "process_name")
    assert set(devices.values()) <= set(names(emulated, "process_name").values())
    with open(placed / "placement.csv") as f:
        placement = {row["node"]: row["device"] for row in csv.DictReader(f)}
    ops = [e for e in measured["traceEvents"] if e["ph"] == "X" and e["name"] in placement]
    assert len({e["pid"] for e in ops}) >= 2 and len(ops) > report["num_nodes"] // 3
    assert all(devices[e["pid"]] == placement[e["name"]] for e in ops)    # each op on its placed device
    assert any(e["ph"] == "C" and e["name"] == "memory" for e in measured["traceEvents"])
    first = tmp_path / "first.json"               # one step: the traced first step is the one written
    assert main(["run", str(placed), "--steps", "1", "--trace", str(first)]) == 0
    assert set(names(read_trace(first), "process_name").values()) == set(devices.values())


def test_tensorboard_serves_the_placed_graph_with_its_devices(placed, tmp_path):
    from pardnn.tf.graphdef import read_graph_def
    expected = {n.name: n.device for n in read_graph_def(str(placed / "placed_graph.pb")).node}
    with tensorboard(placed / "tensorboard", tmp_path / "tensorboard.log") as base:
        served = served_devices(base)
    assert served == expected and len(set(served.values())) >= 2

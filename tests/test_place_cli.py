"""`pardnn place` on cost graph JSON files (no TensorFlow involved)."""

import csv
import json

import numpy as np
import pytest

from pardnn.cli import main
from pardnn.graph.constraints import violations
from pardnn.hardware import parse_devices
from pardnn.graph import CostGraph
from pardnn.io.placement import read_csv


@pytest.fixture
def graph_json(tmp_path):
    n = 12
    names = [f"n{i}" for i in range(n)]
    g = CostGraph.build(names=names, comp_us=np.arange(1, n + 1), out_bytes=[100] * n,
                        group=[0, 0, 1, 2, 3, 3, 4, 5, 6, 7, 8, 9],
                        edge_src=list(range(n - 1)), edge_dst=list(range(1, n)),
                        edge_bytes=[100] * (n - 1))
    path = tmp_path / "g.json"
    g.to_json(path)
    return g, path


def test_round_robin_place_writes_outputs(graph_json, tmp_path, capsys):
    g, path = graph_json
    out = tmp_path / "out"
    assert main(["place", str(path), "--devices", "cpu:3", "--algorithm", "round-robin", "-o", str(out)]) == 0
    report = json.loads((out / "report.json").read_text())
    assert report["algorithm"] == "round-robin" and report["num_nodes"] == 12
    assert sum(report["nodes_per_device"]) == 12 and min(report["nodes_per_device"]) > 0
    rows = list(csv.reader(open(out / "placement.csv")))
    assert rows[0] == ["node", "device"] and len(rows) == 13
    cluster = parse_devices("cpu:3")
    device = read_csv(out / "placement.csv", g, cluster)
    assert violations(g, cluster, device) == []
    assert device[0] == device[1]                 # one colocation group
    assert sorted(p.name for p in out.iterdir()) == [".pardnn-output.json", "inputs.json", "placement.csv", "report.json",
                                                     "tensorboard", "trace.json"]
    assert json.loads((out / ".pardnn-output.json").read_text()) == {
        "files": ["inputs.json", "placement.csv", "report.json", "tensorboard", "trace.json"]}
    assert "round-robin" in capsys.readouterr().out


@pytest.mark.parametrize("argv, message", [
    (["--devices", "dgx9"], "--devices"),
    (["--devices", "cpu:2", "--memory", "huge"], "--memory"),
    (["--devices", "cpu:2", "--algorithm", "magic"], "round-robin"),
])
def test_bad_flags_exit_2_and_write_nothing(graph_json, tmp_path, capsys, argv, message):
    _, path = graph_json
    out = tmp_path / "out"
    assert main(["place", str(path), *argv, "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1
    assert not out.exists()


def test_missing_and_corrupt_profiles(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["place", str(tmp_path / "nope"), "--devices", "cpu:2", "--algorithm", "round-robin", "-o", str(out)]) == 2
    assert "does not exist" in capsys.readouterr().err
    bad = tmp_path / "bad.json"
    bad.write_text("garbage")
    assert main(["place", str(bad), "--devices", "cpu:2", "--algorithm", "round-robin", "-o", str(out)]) == 2
    assert "bad.json" in capsys.readouterr().err
    pb = tmp_path / "graph.pb"
    pb.write_bytes(b"\x0a\x97binary")
    assert main(["place", str(pb), "--devices", "cpu:2", "--algorithm", "round-robin", "-o", str(out)]) == 2
    assert "give the profile directory" in capsys.readouterr().err
    assert not out.exists()


def test_placement_csv_errors_give_line_numbers(graph_json, tmp_path):
    from pardnn.base.errors import UserError
    g, _ = graph_json
    cluster = parse_devices("cpu:2")
    bad = tmp_path / "p.csv"
    lines = ["node,device"] + [f"n{i},0" for i in range(12)]
    for idx, text, message in [(3, "ghost,0", r"p.csv:4: node 'ghost'"),
                               (5, "n4,7", r"p.csv:6: device index 7"),
                               (2, "n1,TPU:0", r"p.csv:3: device 'TPU:0'")]:
        rows = list(lines)
        rows[idx] = text
        bad.write_text("\n".join(rows) + "\n")
        with pytest.raises(UserError, match=message):
            read_csv(bad, g, cluster)
    bad.write_text("\n".join(lines[:-1]) + "\n")
    with pytest.raises(UserError, match="1 nodes of the profile have no device"):
        read_csv(bad, g, cluster)

"""`pardnn compare` on a cost graph JSON (no TensorFlow involved)."""

import json

import pytest

from pardnn.placers import registry as algorithms
from pardnn.cli import main
from pardnn.graph import CostGraph

FIELDS = {"algorithm", "makespan_us", "speedup", "peak_memory_bytes", "feasible", "comm_bytes",
          "placement_seconds"}


@pytest.fixture
def graph_json(tmp_path):
    """Two independent chains of 4 ops (10 us each, 100-byte tensors): on 2 devices the
    best makespan is one chain's length, half the single-device one."""
    names = [f"{c}{i}" for c in "ab" for i in range(4)]
    g = CostGraph.build(names=names, comp_us=[10.0] * 8, out_bytes=[100] * 8,
                        edge_src=[0, 1, 2, 4, 5, 6], edge_dst=[1, 2, 3, 5, 6, 7],
                        edge_bytes=[100] * 6)
    path = tmp_path / "g.json"
    g.to_json(path)
    return path


def test_table_has_one_row_per_algorithm(graph_json, capsys):
    assert main(["compare", str(graph_json), "--devices", "cpu:2"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0].startswith("8 nodes, 6 edges on 2 devices")
    assert lines[1].split()[0] == "algorithm"
    assert [x.split()[0] for x in lines[2:]] == algorithms.names()
    assert all(" yes " in x for x in lines[2:])


def test_json_has_the_fields(graph_json, capsys):
    assert main(["compare", str(graph_json), "--devices", "cpu:2", "--algorithms", "single,pardnn,single",
                 "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["num_nodes"] == 8 and len(doc["devices"]) == 2
    rows = {r["algorithm"]: r for r in doc["results"]}
    assert list(rows) == ["single", "pardnn"]          # duplicates dropped, order kept
    assert set(rows["single"]) == FIELDS and set(rows["pardnn"]) == FIELDS | {"candidate"}
    assert all(r["feasible"] for r in rows.values())
    assert rows["single"]["makespan_us"] == pytest.approx(80.0)
    assert rows["single"]["speedup"] == pytest.approx(1.0) and rows["single"]["comm_bytes"] == 0
    assert rows["pardnn"]["makespan_us"] == pytest.approx(40.0)   # one chain per device
    assert rows["pardnn"]["speedup"] == pytest.approx(2.0)


def test_plot_writes_a_png(graph_json, tmp_path, capsys):
    png = tmp_path / "bars.png"
    assert main(["compare", str(graph_json), "--devices", "cpu:2", "--algorithms", "single,pardnn",
                 "--plot", str(png)]) == 0
    data = png.read_bytes()
    assert len(data) > 1000 and data[:8] == b"\x89PNG\r\n\x1a\n"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("bars")] == ["bars.png"]


@pytest.mark.parametrize("argv, message", [
    (["--algorithms", "single,magic"], "unknown algorithm 'magic' (choose from pardnn,"),
    (["--algorithms", " , "], "--algorithms: no algorithm named"),
    (["--plot", "bars.svg"], "must end in .png"),
])
def test_bad_flags_exit_2_with_one_line(graph_json, capsys, argv, message):
    assert main(["compare", str(graph_json), "--devices", "cpu:2", *argv]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert message in err and len(err.splitlines()) == 1 and captured.out == ""
    if "magic" in message:
        assert all(name in err for name in algorithms.names())


def test_memory_no_placer_can_meet_gives_infeasible_rows(graph_json, capsys):
    # an op's working set is its input plus its output, 200 B; capacity is 90 B
    assert main(["compare", str(graph_json), "--devices", "cpu:2", "--memory", "100",
                 "--algorithms", "single,pardnn,metis"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert [x.split()[0] for x in lines[2:5]] == ["single", "pardnn", "metis"]
    assert all("NO (cannot fit)" in x for x in lines[2:5])
    reasons = lines[5:]                    # each distinct refusal once, naming its placers
    assert reasons and all(": memory: " in x and "raise --memory" in x for x in reasons)
    assert sorted(a for x in reasons for a in x.split(": memory: ")[0].split(", ")) == \
        ["metis", "pardnn", "single"]


def test_memory_limit_json_reports_the_reason(graph_json, capsys):
    assert main(["compare", str(graph_json), "--devices", "cpu:2", "--memory", "100",
                 "--algorithms", "heft", "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)["results"]
    assert row["feasible"] is False and "raise --memory" in row["error"]

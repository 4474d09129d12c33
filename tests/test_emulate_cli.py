"""`pardnn emulate`: the dry run agrees with `pardnn place`, plots, and rejects bad CSVs."""

import json

import numpy as np
import pytest

from pardnn.cli import main
from pardnn.graph import NORMAL, CostGraph


@pytest.fixture
def placed(tmp_path):
    """A 40-node fork-join graph placed by pardnn on cpu:3."""
    rng = np.random.default_rng(0)
    n = 40
    src = [0] * 12 + list(range(1, 13)) + list(range(13, 39))
    dst = list(range(1, 13)) + [13] * 12 + list(range(14, 40))
    graph = CostGraph.build(names=[f"op{i}" for i in range(n)], comp_us=rng.uniform(5, 50, n),
                            out_bytes=rng.integers(1_000, 100_000, n), kind=[NORMAL] * n,
                            edge_src=src, edge_dst=dst, edge_bytes=rng.integers(1_000, 100_000, len(src)))
    path = tmp_path / "g.json"
    graph.to_json(path)
    out = tmp_path / "placed"
    assert main(["place", str(path), "--devices", "cpu:3", "-o", str(out)]) == 0
    return path, out


def test_emulate_agrees_exactly_with_place_and_plots(placed, tmp_path, capsys):
    path, out = placed
    capsys.readouterr()
    report, plot = tmp_path / "emu.json", tmp_path / "timeline.png"
    assert main(["emulate", str(path), "--placement", str(out / "placement.csv"), "--devices", "cpu:3",
                 "--report", str(report), "--plot", str(plot)]) == 0
    placed_report = json.loads((out / "report.json").read_text())
    emulated = json.loads(report.read_text())
    for key in ("makespan_us", "single_device_us", "lower_bound_us", "peak_memory_bytes",
                "feasible", "comm_bytes", "busy_us"):
        assert emulated[key] == placed_report[key], key
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and plot.stat().st_size > 10_000
    table = capsys.readouterr().out
    assert "util" in table and table.count("CPU:") == 3


@pytest.mark.parametrize("edit, message", [
    (lambda rows: rows.__setitem__(5, "ghost,0"), "placement.csv:6: node 'ghost'"),
    (lambda rows: rows.__setitem__(3, rows[3].split(",")[0] + ",9"), "placement.csv:4: device index 9"),
    (lambda rows: rows.pop(), "1 nodes of the profile have no device"),
])
def test_bad_placement_csv_exits_2_with_the_line(placed, tmp_path, capsys, edit, message):
    path, out = placed
    rows = (out / "placement.csv").read_text().splitlines()
    edit(rows)
    bad = tmp_path / "placement.csv"
    bad.write_text("\n".join(rows) + "\n")
    capsys.readouterr()
    report = tmp_path / "r.json"
    assert main(["emulate", str(path), "--placement", str(bad), "--devices", "cpu:3",
                 "--report", str(report)]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1
    assert not report.exists()


def test_placement_on_a_device_the_cluster_lacks(placed, capsys):
    path, out = placed
    assert main(["emulate", str(path), "--placement", str(out / "placement.csv"), "--devices", "cpu:2"]) == 2
    assert "CPU:2" in capsys.readouterr().err


def test_an_unknown_schedule_exits_2(placed, tmp_path, capsys):
    path, out = placed
    report = tmp_path / "r.json"
    assert main(["emulate", str(path), "--placement", str(out / "placement.csv"), "--devices", "cpu:3",
                 "--schedule", "sideways", "--report", str(report)]) == 2
    err = capsys.readouterr().err.strip()
    assert "--schedule: unknown schedule 'sideways'" in err and len(err.splitlines()) == 1
    assert not report.exists()


@pytest.fixture
def small(tmp_path):
    """v (RESIDUAL, 8000 B) and its REFERENCE read r share a group; r feeds two chains."""
    g = CostGraph.build(names=["v", "r", "a1", "a2", "b1", "b2", "j"], comp_us=[0, 0, 5, 7, 6, 4, 2],
                        out_bytes=[0, 0, 4000, 3000, 5000, 2000, 100],
                        persist_bytes=[8000, 0, 0, 0, 0, 0, 0], kind=[1, 2, 0, 0, 0, 0, 0],
                        group=["v", "v", "a1", "a2", "b1", "b2", "j"],
                        edge_src=["v", "r", "r", "a1", "b1", "a2", "b2"],
                        edge_dst=["r", "a1", "b1", "a2", "b2", "j", "j"],
                        edge_bytes=[8000, 8000, 8000, 4000, 5000, 3000, 2000])
    path = tmp_path / "g.json"
    g.to_json(path)
    return path


def emulate_rows(small, tmp_path, rows, *flags):
    placement = tmp_path / "p.csv"
    placement.write_text("\n".join(["node,device", *rows]) + "\n")
    return main(["emulate", str(small), "--placement", str(placement), "--devices", "gpu:2", *flags])


def test_table_shows_busy_time_and_an_overflow(small, tmp_path, capsys):
    report = tmp_path / "em.json"
    rows = ["v,0", "r,0", "a1,0", "a2,0", "b1,1", "b2,1", "j,0"]
    assert emulate_rows(small, tmp_path, rows, "--memory", "10000", "--report", str(report)) == 0
    r = json.loads(report.read_text())
    # device 0 runs a1, a2, j (14 us) and holds v's 8000 B plus a1's 4000 B > 9000 B capacity
    assert r["busy_us"] == [14, 10] and r["feasible"] is False and r["peak_memory_bytes"][0] >= 12000
    out = capsys.readouterr().out
    assert "DOES NOT FIT" in out and "14.0 us" in out


def test_split_colocation_group_exits_2(small, tmp_path, capsys):
    rows = ["v,0", "r,1", "a1,0", "a2,0", "b1,0", "b2,0", "j,0"]
    assert emulate_rows(small, tmp_path, rows) == 2
    err = capsys.readouterr().err.strip()
    assert "colocation group split" in err and len(err.splitlines()) == 1


def test_output_into_a_missing_directory_exits_2(small, tmp_path, capsys):
    rows = ["v,0", "r,0", "a1,0", "a2,0", "b1,0", "b2,0", "j,0"]
    assert emulate_rows(small, tmp_path, rows, "--plot", str(tmp_path / "nope" / "t.png")) == 2
    assert "--plot" in capsys.readouterr().err


def test_table_names_devices_apart_across_hosts(small, tmp_path, capsys):
    placement = tmp_path / "p.csv"
    placement.write_text("node,device\nv,0\nr,0\na1,1\na2,2\nb1,3\nb2,0\nj,1\n")
    assert main(["emulate", str(small), "--placement", str(placement), "--devices", "2xgpu:2"]) == 0
    rows = [line.split()[0] for line in capsys.readouterr().out.splitlines() if "device:GPU" in line]
    assert len(rows) == len(set(rows)) == 4                  # each host's GPU:0 and GPU:1 told apart

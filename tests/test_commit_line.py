"""tools/commit_line.py: the commit line every benchmark prints first."""

import subprocess
import sys
from pathlib import Path

import pytest

from tools.commit_line import commit_line

ROOT = Path(__file__).resolve().parents[1]


def test_names_this_checkouts_commit():
    sha = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                         capture_output=True, text=True, check=True).stdout.strip()
    line = commit_line()
    assert line in (f"commit {sha}", f"commit {sha} with uncommitted changes")


CHEAP_RUNS = [["bench_exact_fit", "--cases", "1", "--algorithms", "single"],
              ["bench_views", "--nodes", "300"],
              ["bench_emulator", "--nodes", "300", "--repeat", "1", "--devices", "cpu:2"],
              ["bench_speed", "--sizes", "300", "--algorithms", "single"]]


@pytest.mark.parametrize("argv", CHEAP_RUNS, ids=lambda argv: argv[0])
def test_a_benchmark_run_prints_it_first(argv):
    """Run for real on a tiny input: the first line of its output is this checkout's
    commit line."""
    out = subprocess.run([sys.executable, "-m", f"tools.{argv[0]}", *argv[1:]], capture_output=True,
                         text=True, check=True, timeout=300, cwd=ROOT).stdout
    assert out.splitlines()[0] == commit_line()


CSV_RUNS = [["bench_speed", "--sizes", "300", "--algorithms", "single"],
            ["bench_wall", "--graph", "GRAPH", "--devices", "cpu:2", "--memory", "1PiB", "--repeat", "1"]]


@pytest.mark.parametrize("argv", CSV_RUNS, ids=lambda argv: argv[0])
def test_a_benchmark_csv_names_its_commit_and_command(tmp_path, argv):
    """Run for real on a tiny input with -o: the CSV's first line is `# commit ...: python
    -m tools.NAME ARGS`, and every cell it measured is a row under the header."""
    from pardnn.graph import CostGraph
    graph = tmp_path / "g.json"
    CostGraph.build(names=["a", "b", "c"], comp_us=[5.0, 7.0, 3.0], edge_src=["a", "a"],
                    edge_dst=["b", "c"], edge_bytes=[100, 100]).to_json(str(graph))
    argv = [str(graph) if a == "GRAPH" else a for a in argv]
    out = tmp_path / "out"
    subprocess.run([sys.executable, "-m", f"tools.{argv[0]}", *argv[1:], "-o", str(out)],
                   capture_output=True, text=True, check=True, timeout=300, cwd=ROOT)
    lines = (tmp_path / "out.csv").read_text().splitlines()
    assert lines[0].startswith(f"# {commit_line()}: python -m tools.{argv[0]} ")
    rows = lines[2:]
    assert len(rows) == (1 if argv[0] == "bench_speed" else 2)     # bench_wall: pardnn and etf
    assert all(row.count(",") == lines[1].count(",") for row in rows)

"""tools/commit_line.py: the commit line every benchmark prints first."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
from commit_line import commit_line  # noqa: E402


def test_names_this_checkouts_commit():
    sha = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                         capture_output=True, text=True, check=True).stdout.strip()
    line = commit_line()
    assert line in (f"commit {sha}", f"commit {sha} with uncommitted changes")


CHEAP_RUNS = [["bench_exact_fit.py", "--cases", "1", "--algorithms", "single"],
              ["bench_views.py", "--nodes", "300"],
              ["bench_emulator.py", "--nodes", "300", "--repeat", "1", "--devices", "cpu:2"],
              ["bench_speed.py", "--sizes", "300", "--algorithms", "single"]]


@pytest.mark.parametrize("argv", CHEAP_RUNS, ids=lambda argv: argv[0])
def test_a_benchmark_run_prints_it_first(argv):
    """Run for real on a tiny input: the first line of its output is this checkout's
    commit line."""
    out = subprocess.run([sys.executable, str(ROOT / "tools" / argv[0]), *argv[1:]], capture_output=True,
                         text=True, check=True, timeout=300).stdout
    assert out.splitlines()[0] == commit_line()

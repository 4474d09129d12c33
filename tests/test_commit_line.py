"""tools/commit_line.py: the commit line every benchmark prints first."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
from commit_line import commit_line  # noqa: E402


def test_names_this_checkouts_commit():
    sha = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                         capture_output=True, text=True, check=True).stdout.strip()
    line = commit_line()
    assert line in (f"commit {sha}", f"commit {sha} with uncommitted changes")


def test_every_benchmark_prints_it():
    for path in sorted((ROOT / "tools").glob("*.py")):
        text = path.read_text()
        if "def main(" in text:
            assert "print_commit()" in text, path.name

"""The first line every benchmark prints: the git commit it ran on, and whether the
work tree had uncommitted changes, so each table in docs/ can be traced to its code."""

import csv
import functools
import os
import shlex
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@functools.lru_cache(maxsize=None)
def commit_line() -> str:
    """`commit abc1234`, `commit abc1234 with uncommitted changes`, or `commit unknown`:
    read once, so that a CSV written at the end of a long run names the commit it
    started on."""
    def git(*args):
        return subprocess.run(["git", "-C", ROOT, *args], capture_output=True, text=True,
                              check=True).stdout.strip()
    try:
        sha = git("rev-parse", "--short", "HEAD")
        dirty = git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.CalledProcessError):
        return "commit unknown (not a git checkout)"
    return f"commit {sha}" + (" with uncommitted changes" if dirty else "")


def print_commit() -> None:
    print(commit_line(), flush=True)


def csv_comment() -> str:
    """The first line of a benchmark's CSV: `# commit abc1234: python -m tools.x ARGS`,
    the commit and the command that made it."""
    script = os.path.relpath(os.path.abspath(sys.argv[0]), ROOT)
    name = os.path.splitext(script)[0].replace(os.sep, ".")
    argv = ["-m", name, *sys.argv[1:]] if name.startswith("tools.") else [script, *sys.argv[1:]]
    return f"# {commit_line()}: python {' '.join(shlex.quote(a) for a in argv)}\n"


def write_rows(path, rows) -> None:
    """A benchmark's rows (dicts with the same keys) as CSV under its `csv_comment`."""
    with open(path, "w", newline="") as f:
        f.write(csv_comment())
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)

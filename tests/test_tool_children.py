"""The tools' child processes (CONTRIBUTING.md, "Add a benchmark"): tools/ is a package
run from the repository root as `python -m tools.NAME`, so a child a tool starts runs
the same way, from the root, and no script a tool generates edits `sys.path`."""

import ast
import os
import subprocess
from pathlib import Path

from tools import bench_least_memory

ROOT = Path(__file__).resolve().parents[1]


def _docstrings(tree) -> set:
    return {id(node.body[0].value) for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}


def sys_path_in_strings(source: str) -> list:
    """Lines of the string constants (generated code; not docstrings) that name sys.path."""
    tree = ast.parse(source)
    prose = _docstrings(tree)
    return [node.lineno for node in ast.walk(tree) if isinstance(node, ast.Constant)
            and isinstance(node.value, str) and "sys.path" in node.value and id(node) not in prose]


def test_no_tool_generates_code_that_edits_sys_path():
    found = [f"{path.relative_to(ROOT)}:{line}" for path in sorted((ROOT / "tools").glob("*.py"))
             for line in sys_path_in_strings(path.read_text(encoding="utf-8"))]
    assert found == []
    planted = 'CHILD = """\nimport sys\nsys.path.insert(0, {root!r})\n"""\n'
    assert sys_path_in_strings('"""A tool: no sys.path edits."""\n' + planted) == [2]


def test_a_keras_profile_is_made_by_python_m_from_the_root(tmp_path, monkeypatch):
    ran = []

    def run(cmd, **kw):
        ran.append((cmd, kw.get("cwd")))
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(bench_least_memory.subprocess, "run", run)
    monkeypatch.chdir(tmp_path)
    out = bench_least_memory.profile_dir("profiles", "keras-encoder")
    (cmd, cwd), = ran
    assert cmd[1:] == ["-m", "tools.bench_least_memory", "--keras-child", "keras-encoder", "--profiles", out]
    assert Path(cwd) == ROOT and out == os.path.join(tmp_path, "profiles", "keras-encoder")

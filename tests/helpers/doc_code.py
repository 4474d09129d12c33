"""The Python the docs and examples/ hold, for tests/test_docs.py and
tests/test_public.py: the fenced ```python blocks of README.md, CONTRIBUTING.md and
docs/*.md, the pardnn imports in them and in examples/*.py, and a child process that
runs those imports."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parents[2]
OURS = ("pardnn", "pardnn_builtin_models")      # the top-level packages this repository installs
# a package installed from a folder of another name (setup.cfg's package_dir,
# tests/test_layout.py checks it): the built-in model scripts sit in models/
PACKAGE_DIRS = {"pardnn_builtin_models": "models"}
PYTHON_BLOCK = re.compile(r"^ {0,3}(```|~~~)python[^\n]*\n(.*?)^ {0,3}\1", re.S | re.M)


class Import(NamedTuple):
    """One import of this repository's code: `import module` (names empty) or
    `from module import names`, with where it is written."""

    where: str          # "docs/models.md:15"
    module: str
    names: tuple        # the imported names; () for `import module`
    source: str         # the statement, as Python runs it


def doc_files() -> list[Path]:
    docs = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").glob("*.md"))]
    return [d for d in docs if d.exists()]


def example_files() -> list[Path]:
    return sorted((ROOT / "examples").glob("*.py"))


def python_blocks(text: str) -> list[tuple[int, str]]:
    """(line number of the block's first line of code, code) for each ```python block."""
    return [(text.count("\n", 0, m.start(2)) + 1, m.group(2)) for m in PYTHON_BLOCK.finditer(text)]


def _ours(module: str) -> bool:
    return module.split(".")[0] in OURS


def imports_in(code: str, where: str, first_line: int = 1) -> list[Import]:
    """This repository's imports in `code`. A block that is not whole Python (a `...`
    standing for code, a shell line) is read a statement at a time: each import line,
    with the lines its parentheses continue on."""
    try:
        statements = sorted(((n, first_line + n.lineno - 1) for n in ast.walk(ast.parse(code))
                             if isinstance(n, (ast.Import, ast.ImportFrom))), key=lambda s: s[1])
    except SyntaxError:
        statements = _import_lines(code, first_line)
    found = []
    for node, line in statements:
        at = f"{where}:{line}"
        if isinstance(node, str):       # an import line that is no Python
            found.append(Import(at, "?", (), node))
            continue
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and _ours(node.module):
            names = tuple(a.name for a in node.names)
            found.append(Import(at, node.module, names, f"from {node.module} import {', '.join(names)}"))
        elif isinstance(node, ast.Import):
            found += [Import(at, a.name, (), f"import {a.name}") for a in node.names if _ours(a.name)]
    return found


def _import_lines(code: str, first_line: int) -> list:
    lines, statements, at = code.split("\n"), [], 0
    while at < len(lines):
        start = at
        text = lines[at]
        if re.match(r"\s*(from|import)\s", text):
            while text.count("(") > text.count(")") and at + 1 < len(lines):
                at += 1
                text += "\n" + lines[at]
            try:
                statements += [(node, first_line + start) for node in ast.parse(text.strip()).body]
            except SyntaxError:
                if any(re.search(rf"\b{top}\b", text) for top in OURS):
                    statements.append((text.strip(), first_line + start))
        at += 1
    return statements


def doc_imports(text: str, where: str) -> list[Import]:
    """This repository's imports in the Python blocks of one Markdown page."""
    return [i for line, block in python_blocks(text) for i in imports_in(block, where, line)]


def all_doc_imports() -> list[Import]:
    return [i for doc in doc_files()
            for i in doc_imports(doc.read_text(encoding="utf-8"), doc.relative_to(ROOT).as_posix())]


def example_imports() -> list[Import]:
    return [i for path in example_files()
            for i in imports_in(path.read_text(encoding="utf-8"), path.relative_to(ROOT).as_posix())]


def self_contained(code: str) -> bool:
    """Whether a block is whole Python that binds every name it reads (builtins aside)
    and stands for no code with `...`: it can run as it is."""
    import builtins
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return False
    bound = set(dir(builtins))
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            bound |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            bound.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, ast.Constant) and node.value is Ellipsis:
            return False
    return all(node.id in bound for node in ast.walk(tree) if isinstance(node, ast.Name))


_RUN_IMPORTS = """
import json, sys
failed = []
for where, source in json.loads(sys.stdin.read()):
    try:
        exec(source, {})
    except Exception as exc:
        failed.append(f"{where}: `{source}`: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
print(json.dumps(failed))
"""


def failed_imports(imports: list[Import]) -> list[str]:
    """'where: statement: error' for each import that fails when Python runs it, all
    run in one child process (TensorFlow, which pardnn.tf's names import, stays out of
    the test's own process)."""
    if not imports:
        return []
    run = subprocess.run([sys.executable, "-c", _RUN_IMPORTS], cwd=ROOT, capture_output=True, text=True,
                         input=json.dumps([(i.where, i.source) for i in imports]), timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    return json.loads(run.stdout.strip().splitlines()[-1])

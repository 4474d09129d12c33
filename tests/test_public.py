"""The public surface (docs/architecture.md, "The public surface"): the packages users
import, each with an `__all__` whose every name exists, and docs and examples that
import only from it, so that moving a module inside a package breaks no user's code
and no doc."""

import ast
import importlib
import json
import re
import subprocess
import sys

import pytest

from tests.helpers.doc_code import (PACKAGE_DIRS, ROOT, Import, all_doc_imports, doc_files, example_files,
                                    example_imports, imports_in, python_blocks)

# The public packages, lowest layer first, and the one module users call (the CLI).
PUBLIC = ("pardnn", "pardnn.graph", "pardnn.hardware", "pardnn.io", "pardnn.models", "pardnn.emulator",
          "pardnn.placers", "pardnn.tf", "pardnn_builtin_models", "pardnn.pipeline", "pardnn.keras",
          "pardnn.cli")

DOTTED = re.compile(r"(?<![\w.])pardnn(?:_builtin_models)?(?:\.[A-Za-z_]\w*)+")


def public_all(module: str) -> list:
    """`module`'s __all__, read from its source (no import: pardnn.tf's names import TF)."""
    top, dot, rest = module.partition(".")
    base = PACKAGE_DIRS.get(top, top) + (dot + rest).replace(".", "/")      # its folder
    path = ROOT / (base + ".py")
    path = path if path.exists() else ROOT / base / "__init__.py"
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "__all__" for t in node.targets):
            if isinstance(node.value, ast.Call):          # sorted(_API): the lazy API's keys
                return sorted(importlib.import_module(module).__all__)
            return ast.literal_eval(node.value)
    return []


def import_problems(imports: list[Import]) -> list[str]:
    """Imports of anything but a public package or a name in its __all__."""
    problems = []
    for i in imports:
        if i.module not in PUBLIC:
            problems.append(f"{i.where}: `{i.source}`: {i.module} is not public (import from {_nearest(i.module)})")
        else:
            problems += [f"{i.where}: `{i.source}`: {name} is not in {i.module}.__all__"
                         for name in i.names if name not in public_all(i.module)]
    return problems


def attribute_problems(code: str, where: str) -> list[str]:
    """`pardnn.tf.name`-style uses in code whose name after the public package is not in
    its __all__ (`pardnn.tf.distributed.open_session` reaches past it)."""
    problems = []
    for dotted in sorted(set(DOTTED.findall(code))):
        parts = dotted.split(".")
        cut = max((n for n in range(1, len(parts) + 1) if ".".join(parts[:n]) in PUBLIC), default=0)
        if cut == 0:
            problems.append(f"{where}: `{dotted}` is not public")
        elif cut < len(parts) and parts[cut] not in public_all(".".join(parts[:cut])):
            problems.append(f"{where}: `{dotted}`: {parts[cut]} is not in {'.'.join(parts[:cut])}.__all__")
    return problems


def _nearest(module: str) -> str:
    parts = module.split(".")
    return next((".".join(parts[:n]) for n in range(len(parts), 0, -1) if ".".join(parts[:n]) in PUBLIC), "?")


def _code_outside_comments(code: str) -> str:
    return "\n".join(line.split("#")[0] for line in code.split("\n"))


def docs_and_examples_code() -> list[tuple[str, str]]:
    """(where, code) of every Python block of the docs and every example."""
    blocks = [(f"{doc.relative_to(ROOT).as_posix()}:{line}", code)
              for doc in doc_files() for line, code in python_blocks(doc.read_text(encoding="utf-8"))]
    return blocks + [(p.relative_to(ROOT).as_posix(), p.read_text(encoding="utf-8")) for p in example_files()]


@pytest.mark.parametrize("module", PUBLIC)
def test_every_public_package_has_an_all(module):
    assert public_all(module), f"{module} has no __all__"


_CHECK_ALL = """
import importlib, json, sys
missing = []
for module in sys.argv[1:]:
    package = importlib.import_module(module)
    for name in package.__all__:
        try:
            getattr(package, name)
        except AttributeError:
            try:
                importlib.import_module(f"{module}.{name}")       # a public submodule
            except ImportError as exc:
                missing.append(f"{module}.{name}: {exc}")
print(json.dumps(missing))
"""


def test_every_name_in_every_all_exists():
    """Run in a child process: pardnn.tf's and pardnn.keras's names import TensorFlow."""
    run = subprocess.run([sys.executable, "-c", _CHECK_ALL, *PUBLIC], cwd=ROOT, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert json.loads(run.stdout.strip().splitlines()[-1]) == []


def test_public_packages_import_no_tensorflow():
    """The lazy APIs stay lazy: importing the surface costs no TensorFlow start-up."""
    code = f"import sys\nfor m in {PUBLIC!r}: __import__(m)\nprint('tensorflow' in sys.modules)"
    run = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert run.stdout.strip() == "False", run.stderr[-2000:]


def test_docs_and_examples_import_only_the_public_surface():
    imports = all_doc_imports() + example_imports()
    assert len({i.where.split(":")[0] for i in imports}) >= 5
    problems = import_problems(imports)
    for where, code in docs_and_examples_code():
        problems += attribute_problems(_code_outside_comments(code), where)
    assert not problems, "docs and examples reach past the public surface:\n  " + "\n  ".join(problems)


def test_planted_private_imports_fail():
    code = ("from pardnn.tf.distributed import open_session\nfrom pardnn.hardware import parse_devices, presets\n"
            "import pardnn.pipeline.portfolio\nfrom pardnn.tf import open_session\nimport pardnn.keras\n"
            "pardnn.keras.plan(build)\npardnn.tf.distributed.loopback_cluster()\npardnn.keras.planning.plan()\n")
    problems = import_problems(imports_in(code, "planted.py"))
    assert [p.split(":")[1] for p in problems] == ["1", "2", "3"], problems
    assert "presets is not in pardnn.hardware.__all__" in problems[1]
    problems = attribute_problems(code, "planted.py")
    assert len(problems) == 4 and not any("keras.plan`" in p for p in problems), problems


def surface_rows() -> dict:
    """docs/architecture.md's table of the public surface: package -> its row."""
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    section = text.split("## The public surface", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        match = re.match(r"\| `([\w.]+)` \|(.*)\|\s*$", line)
        if match:
            rows[match.group(1)] = match.group(2)
    return rows


def test_the_architecture_page_tables_every_public_name():
    rows = surface_rows()
    assert set(rows) == set(PUBLIC)
    missing = [f"{module}.{name}" for module in PUBLIC for name in public_all(module)
               if f"`{name}`" not in rows[module] and f"`{name}(" not in rows[module]]
    assert missing == [], "docs/architecture.md, \"The public surface\", leaves out: " + ", ".join(missing)

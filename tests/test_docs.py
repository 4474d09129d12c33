"""Every module, function, class and file that README.md, CONTRIBUTING.md and docs/*.md
name in backticks exists (house rule: docs hold what is true now).

What counts as a name. Inline code spans are read outside fenced and indented code
blocks; a span's name is its leading token, up to the first space or "(" (so
`place(graph, cluster, timings)` names `place`); a token followed by anything else
("=", "[", quotes, "::") is prose or a setting and is not read. Then:

1. **Paths.** A token that starts with one of the repository's top-level entries
   (`pardnn/`, `tools/`, `tests/`, `docs/`, `examples/`, `models/`,
   `.ci/`, or a root file such as `setup.cfg`) must exist; a trailing "/" means a
   folder. Any other token ending in ".py" (`io/outputs.py`, `costgraph.py`) must end
   the path of some Python file of the repository at a "/" boundary. A path part in
   capitals is a placeholder (`tools/NAME.py`). Other paths (`placed/trace.json`,
   `step1_phases/`, `/job:worker/task:1`, TF scopes such as `adam/`) are read as
   outputs, partial folders or TF names: not checked.
2. **`file.py:name`** (or `file.py:Class.name`): the file as in 1, and some file it
   matches defines the name (as in 3).
3. **Dotted names rooted at a package of this repository** (`pardnn.pipeline.choice`,
   `pardnn.base.errors.UserError`, `tools.report_doc`): the longest prefix that is a module
   must exist, the next name must be bound at its top level (def, class, assignment,
   import; a module with `__getattr__` also binds its string keys, as pardnn.tf's lazy
   API does), and a name after a class must be a member of the class or of a base class
   defined here.
4. **`module.name` and `Class.name`**: where `module` is the stem of a Python file under
   pardnn/ or tools/ (`exact.deterministic_limit`), some such file binds `name` at top
   level; where `Class` is a class defined in pardnn/ (`CostGraph.from_json`), the class
   has the member. A key path into report.json (`refine_memory.batches_far_behind`,
   whose first part is a field of pardnn.pipeline.report.Report) is not a module name.
5. **Identifiers that look like code**: snake_case with an underscore (`lower_bound_us`,
   `_refine_early`), CamelCase or a capitalised word (`TwoHeaps`, `Judging`), UPPER_CASE
   with an underscore (`INTERPRETED_BELOW`). Each must be bound somewhere in the
   repository's Python (a def, class, assignment, parameter, keyword argument, attribute,
   import, or a string constant that is one identifier or a dotted name: report keys, TF
   op names; not words inside longer strings such as docstrings), or
   be in OUTSIDE (names from outside this code, such as environment variables).
6. **Paths in plain prose** (not in backticks): a path under pardnn/, tools/, tests/,
   docs/, examples/ or models/ with a file extension, such as
   tests/test_layout.py, must exist as rule 1 says.
7. **Commands.** In spans and code blocks alike, `python -m NAME` with NAME rooted at
   pardnn or tools must name a module that exists, and tools run as modules
   (`python tools/bench_speed.py` is stale); a part in capitals is a placeholder.

8. **The Python blocks' imports.** Every `from pardnn... import ...` and `import pardnn...`
   (and the same of pardnn_builtin_models) in the ```python blocks is run, in one
   child process: the module must import and every imported name must exist.
   tests/test_public.py checks that they import only the public surface.

Plain words (`place`, `pardnn`), flags (`--devices`), quantities (`0.3x`, `1PiB`),
placeholders in capitals (`PROFILE`) and JSON paths with brackets are prose.

The checker of rules 1-7 parses the sources with ast (no import, no TensorFlow), so it
is fast; test_planted_stale_names shows it fails on each kind of stale name, and
test_planted_stale_imports that rule 8 fails on a moved name and a moved module.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest

from tests.helpers.doc_code import (PACKAGE_DIRS, all_doc_imports, doc_imports, failed_imports, python_blocks,
                                    self_contained)

ROOT = Path(__file__).resolve().parents[1]
PY_DIRS = ("pardnn", "models", "tools", "tests", "examples")
PACKAGES = ("pardnn", "pardnn_builtin_models", "tools", "tests")

# Names the docs cite from outside this code (rule 5; add one here when a doc names
# something that is not this repository's): environment variables, TensorFlow's ops,
# C++ functions, trace and config fields, Keras' layer names, the thesis' names and
# other tools' keys.
OUTSIDE = {
    "OPENBLAS_CORETYPE", "MALLOC_MMAP_THRESHOLD_", "TF_CUDNN_WORKSPACE_LIMIT_IN_MB",
    "Compute", "Shape", "Reshape", "Fill", "BroadcastGradientArgs", "_Arg", "_Retval",
    "_FusedMatMul", "_MklMatMul", "_MklNativeFusedMatMul",
    "MeasureCosts", "DeterminePeakMemoryUsage", "SchedulerState",
    "all_end_rel", "memory_limit", "dense_1", "nodes_heap", "install_requires",
}

FENCE = re.compile(r"^ {0,3}(```|~~~).*?^ {0,3}\1", re.S | re.M)
SPAN = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")
TOKEN = re.compile(r"[\w./:-]+")
COMMAND = re.compile(r"python3? -m ([\w.]+)|python3? (tools/[\w/]+\.py)")
PROSE_PATH = re.compile(r"(?<![\w/.`-])((?:pardnn|models|tools|tests|docs|examples)/[\w./-]*\.(?:py|md|csv|json|cfg|toml|sh))\b")
IDENT = re.compile(r"[A-Za-z_]\w*")
FILE_EXT = re.compile(r"\.(py|md|csv|json|cfg|toml|txt|pb|sh|png|yml|yaml)$")


def doc_files() -> list[Path]:
    docs = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").glob("*.md"))]
    return [d for d in docs if d.exists()]


# ---------------------------------------------------------------- the code's names


def _py_files() -> list[Path]:
    files = sorted(ROOT.glob("*.py"))
    for top in PY_DIRS:
        files += sorted(p for p in (ROOT / top).rglob("*.py") if ".venv" not in p.parts)
    return [f for f in files if f != Path(__file__).resolve()]   # not this file's planted names


def _members(cls: ast.ClassDef) -> set[str]:
    """What a class binds: methods, class-level and annotated fields, and self.X."""
    names = set()
    for node in ast.walk(cls):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                and node.value.id == "self" and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
    return names


def _top_level(tree: ast.Module) -> set[str]:
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, (ast.If, ast.Try)):
            names |= _top_level(ast.Module(body=node.body + getattr(node, "orelse", []), type_ignores=[]))
    if "__getattr__" in names:    # a lazy API: its string keys are its names
        names.update(n.value for n in ast.walk(tree)
                     if isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value.isidentifier())
    return names


class Code:
    """The repository's Python, parsed once: files, modules, classes and every name."""

    def __init__(self):
        self.files = {p.relative_to(ROOT).as_posix(): p for p in _py_files()}
        self.top: dict[str, set[str]] = {}          # file -> names bound at top level
        self.classes: dict[str, list[tuple[set[str], list[str]]]] = {}   # name -> (members, bases)
        self.bound: set[str] = set()                # every name bound or spelled anywhere
        for rel, path in self.files.items():
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=rel)
            self.top[rel] = _top_level(tree)
            for node in ast.walk(tree):
                self._collect(node, rel)

    def _collect(self, node: ast.AST, rel: str) -> None:
        if isinstance(node, ast.ClassDef) and rel.startswith("pardnn"):
            bases = [b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases]
            self.classes.setdefault(node.name, []).append((_members(node), bases))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            self.bound.add(node.name)
        elif isinstance(node, ast.Name):
            self.bound.add(node.id)
        elif isinstance(node, ast.Attribute):
            self.bound.add(node.attr)
        elif isinstance(node, ast.arg):
            self.bound.add(node.arg)
        elif isinstance(node, ast.keyword) and node.arg:
            self.bound.add(node.arg)
        elif isinstance(node, ast.alias):
            self.bound.update((node.asname or node.name).split("."))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and re.fullmatch(r"[\w.:]+", node.value):
            self.bound.update(IDENT.findall(node.value))     # "moved_nodes", "pardnn.tf.function:placed"

    def module_file(self, dotted: str) -> str | None:
        top, dot, rest = dotted.partition(".")
        base = PACKAGE_DIRS.get(top, top) + (dot + rest).replace(".", "/")
        for rel in (base + ".py", base + "/__init__.py"):
            if rel in self.files:
                return rel
        return None

    def files_ending(self, path: str) -> list[str]:
        return [rel for rel in self.files if rel == path or rel.endswith("/" + path)]

    def stems(self, stem: str) -> list[str]:
        return [rel for rel in self.files if rel.startswith(("pardnn/", "tools/"))
                and Path(rel).stem == stem and Path(rel).name != "__init__.py"]

    def class_has(self, cls: str, member: str, seen=()) -> bool:
        for members, bases in self.classes.get(cls, []):
            if member in members:
                return True
            if any(b not in seen and self.class_has(b, member, (*seen, cls)) for b in bases):
                return True
        return False

    def file_defines(self, rel: str, names: list[str]) -> bool:
        if names[0] not in self.top[rel]:
            return False
        return len(names) == 1 or names[0] not in self.classes or self.class_has(names[0], names[1])


@cache
def code() -> Code:
    return Code()


@cache
def report_keys() -> set[str]:
    """The fields of pardnn.pipeline.report.Report: report.json's top-level keys."""
    tree = ast.parse((ROOT / "pardnn/pipeline/report.py").read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == "Report":
            return {n.target.id for n in node.body if isinstance(n, ast.AnnAssign)}
    return set()


# ---------------------------------------------------------------- the docs' names


def prose_of(text: str) -> str:
    """The page without its fenced and indented code blocks."""
    text = FENCE.sub("", text)
    return "\n".join(line for line in text.split("\n") if not line.startswith(("    ", "\t")))


def spans_of(text: str) -> list[str]:
    """Inline code spans outside fenced and indented code blocks."""
    return SPAN.findall(prose_of(text))


def token_of(span: str) -> str | None:
    """The span's leading name, or None when the span is a setting, flag or prose."""
    span = span.strip()
    match = TOKEN.match(span)
    if not match:
        return None
    token, rest = match.group(0), span[match.end():]
    if rest and rest[0] not in " (":
        return None
    return token.rstrip(".:") if not token.endswith("/") else token


def _check_path(token: str) -> str | None:
    """Rules 1 and 2: a problem with a path, or None."""
    c = code()
    name = None
    if ".py:" in token:
        token, name = token.split(":", 1)
    top = token.split("/")[0]
    if (ROOT / top).exists() and (top in PY_DIRS + ("docs", ".ci") or "/" not in token):
        if "/" not in token and not FILE_EXT.search(token) and token not in PY_DIRS:
            return None               # a bare word that happens to name a root entry
        target = ROOT / token
        if not target.exists() and any(part.isupper() for part in re.split(r"[./]", token)):
            return None               # a placeholder: `tools/NAME.py`
        if not target.exists() or (token.endswith("/") and not target.is_dir()):
            return f"`{token}`: no such {'folder' if token.endswith('/') else 'file'}"
        matches = [token] if token in c.files else []
    elif token.endswith(".py"):
        matches = c.files_ending(token)
        if not matches:
            return f"`{token}`: no Python file ends so"
    else:
        return None
    if name and not any(c.file_defines(rel, name.split(".")) for rel in matches):
        return f"`{token}:{name}`: {token} does not define {name}"
    return None


def _check_dotted(token: str) -> str | None:
    """Rules 3 and 4: a problem with a dotted name, or None."""
    c = code()
    parts = token.split(".")
    if parts[0] in PACKAGES:
        for cut in range(len(parts), 0, -1):
            rel = c.module_file(".".join(parts[:cut]))
            if rel:
                rest = parts[cut:]
                if rest and not c.file_defines(rel, rest):
                    return f"`{token}`: {rel} does not define {'.'.join(rest[:2])}"
                return None
        return f"`{token}`: no such module"
    if len(parts) != 2 or not all(p.isidentifier() for p in parts) or FILE_EXT.search(token):
        return None
    head, name = parts
    if c.classes.get(head):
        return None if c.class_has(head, name) else f"`{token}`: class {head} has no {name}"
    modules = c.stems(head)
    if modules and head not in report_keys():
        if not any(name in c.top[rel] for rel in modules):
            return f"`{token}`: no module {head}.py defines {name}"
    return None


def looks_like_code(word: str) -> bool:
    """Rule 5's test: snake_case with an underscore, CamelCase or a capitalised word,
    UPPER_CASE with an underscore, or a private name (`_latest`)."""
    if not word.isidentifier() or word in OUTSIDE:
        return False
    if "_" in word.strip("_"):
        return any(ch.isalpha() for ch in word)
    return bool(re.fullmatch(r"_*[A-Z]\w*[a-z]\w*", word)) or bool(re.fullmatch(r"_+[a-z]\w*", word))


def check_span(span: str) -> list[str]:
    """The problems with one inline code span."""
    problems = check_commands(span)
    token = token_of(span)
    if token is None:
        return problems
    if "/" in token or ".py" in token:
        problem = _check_path(token)
    elif "." in token:
        problem = _check_dotted(token)
    elif looks_like_code(token) and token not in code().bound:
        problem = f"`{token}`: bound nowhere in the repository's Python"
    else:
        problem = None
    return problems + ([problem] if problem else [])


def check_commands(text: str) -> list[str]:
    """Rule 7: `python -m` commands that name no module, tools run as scripts."""
    problems = []
    for module, script in COMMAND.findall(text):
        if any(part.isupper() for part in re.split(r"[./]", module or script)):
            continue                  # a placeholder: `python -m tools.NAME`
        if script:
            problems.append(f"`python {script}`: tools run as `python -m tools.NAME`")
        elif module.split(".")[0] in ("pardnn", "tools") and not code().module_file(module):
            problems.append(f"`python -m {module}`: no such module")
    return problems


def check_text(text: str) -> list[str]:
    """The problems with one Markdown page: its spans, and the commands in its code blocks."""
    problems = [p for span in spans_of(text) for p in check_span(span)]
    problems += [f"{path}: no such file" for path in PROSE_PATH.findall(SPAN.sub("", prose_of(text)))
                 if not (ROOT / path).is_file()]
    for block in FENCE.finditer(text):
        problems += check_commands(block.group(0))
    indented = "\n".join(line for line in FENCE.sub("", text).split("\n") if line.startswith("    "))
    return problems + check_commands(indented)


# ---------------------------------------------------------------- the tests


@pytest.mark.parametrize("doc", doc_files(), ids=lambda p: p.name)
def test_every_name_in_backticks_exists(doc):
    problems = check_text(doc.read_text(encoding="utf-8"))
    assert not problems, f"{doc.relative_to(ROOT)} names what does not exist:\n  " + "\n  ".join(problems)


@pytest.mark.parametrize("stale", [
    "`pardnn/repair/absorb.py`",                 # a file that is gone
    "`pardnn/placers/baselines/`",               # a folder that is gone
    "`placers/pardnn/slicing.py`",               # a partial path
    "`absorb.py`",                               # a bare file name
    "`pardnn.emulator.evaluate`",                # a function that moved
    "`pardnn.pipeline.no_such_module`",          # a module
    "`pardnn.base.errors.UserError.no_such_method`",  # a class member
    "`pardnn/pipeline/report.py:report_fields`",  # file.py:function
    "`exact._SOLVED`",                           # module.name
    "`CostGraph.no_such_method`",                # Class.name
    "`_refined_beside`",                        # a private function that is gone
    "`Fitted`",                                  # a class that was renamed
    "`choose_finalists(judged)`",               # a call
    "    python -m tools.no_such_tool --flag\n",  # a command in a code block
    "`python tools/bench_speed.py`",             # a tool run as a script
    "(tests/trace_viewer.py)",                   # a path in plain prose
])
def test_planted_stale_names(stale):
    assert check_text(f"Some prose {stale} and more.\n\n{stale}\n"), stale


def test_current_names_pass():
    text = ("`pardnn/pipeline/report.py` `pardnn/placers/step1_phases/` `io/outputs.py` "
            "`costgraph.py` `pardnn.pipeline.choice` `pardnn.base.errors.UserError` "
            "`pardnn.tf.profile_function(step, args)` `pardnn/pipeline/judge.py:judge` "
            "`exact.deterministic_limit` `CostGraph.from_json` `refine_memory.batches_far_behind` "
            "`lower_bound_us` `INTERPRETED_BELOW` `Report` `--devices cpu:4` `placement.csv` "
            "`placed/trace.json` `0.3x` `PROFILE` `cache=True`\n\n    python -m tools.report_doc\n")
    assert check_text(text) == []


def test_every_pardnn_import_in_the_docs_python_runs():
    """Rule 8: the docs' code imports what exists (docs/models.md once imported
    load_module from pardnn.models after it had moved)."""
    imports = all_doc_imports()
    assert {i.where.split(":")[0] for i in imports} >= {"README.md", "docs/models.md", "docs/multihost.md"}
    problems = failed_imports(imports)
    assert not problems, "a Python block of the docs imports what does not exist:\n  " + "\n  ".join(problems)


def self_contained_blocks() -> list:
    return [pytest.param(code, id=f"{doc.name}:{line}") for doc in doc_files()
            for line, code in python_blocks(doc.read_text(encoding="utf-8")) if self_contained(code)]


@pytest.mark.parametrize("code", self_contained_blocks())
def test_self_contained_doc_blocks_run(code, tmp_path):
    """A block that binds every name it uses runs as written (docs/models.md's builds a
    family's tiny graph), in a child process in an empty folder."""
    run = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=600,
                         env={**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "2"})
    assert run.returncode == 0, run.stderr[-3000:]


def test_which_blocks_are_self_contained():
    assert self_contained("import math\nx = math.sqrt(4)\nprint(x)\n")
    assert not self_contained("model = build(x)\n")             # names bound elsewhere
    assert not self_contained("def f():\n    ...\n")            # code left out
    assert not self_contained("with open(p) as f:\n  ~~\n")     # not Python
    assert any(p.id.startswith("models.md:") for p in self_contained_blocks())


def test_planted_stale_imports():
    text = ("```python\nfrom pardnn.models import load_module, resolve_knobs   # moved name\n"
            "model = ...\n```\n\n```python\n    import pardnn.hardware.no_such_module\n"
            "from pardnn.hardware import (parse_devices,\n    Cluster)\n```\n")
    imports = doc_imports(text, "planted.md")
    assert [i.where for i in imports] == ["planted.md:2", "planted.md:7", "planted.md:8"]
    problems = failed_imports(imports)
    assert [p.split(":")[1] for p in problems] == ["2", "7"], problems
    assert "load_module" in problems[0] and "no_such_module" in problems[1]


def test_benchmarks_page_holds_current_tables_only():
    """docs/benchmarks.md keeps each measurement's latest table (git keeps the older
    ones, CONTRIBUTING.md "Add a benchmark"): past 900 lines it is collecting history."""
    lines = (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8").count("\n")
    assert lines < 900, f"docs/benchmarks.md has {lines} lines: drop superseded tables"

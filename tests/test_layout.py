"""The house rules of the source tree (docs/architecture.md): the packages form layers
that import only downwards, no module imports itself back through a cycle, TensorFlow
stays in pardnn/tf, the Keras layer on top (pardnn/keras) and the model scripts, and
setup.cfg installs every package.

Imports by name count as imports: in a module that imports importlib, a string constant
naming a project module ("pardnn.commands.place", or "pardnn.placers.etf:place") is an
edge, so the registry's placers, the CLI's commands, pardnn.tf's lazy API and the
built-in families are held to the same layers."""

import ast
import configparser
from pathlib import Path

import networkx as nx
import pytest

from tests.helpers.doc_code import PACKAGE_DIRS

ROOT = Path(__file__).resolve().parents[1]

# Pipeline layers, lowest first. A module may import its own package or a lower layer,
# never a sibling package of its own layer.
LAYERS = [
    {"pardnn.base.errors"},
    {"pardnn.base.units", "pardnn.base.jsonfile", "pardnn.base.progress", "pardnn.base.compiled"},
    {"pardnn.graph", "pardnn.hardware", "pardnn.io", "pardnn.models"},
    {"pardnn.emulator", "pardnn.repair", "pardnn.placers", "pardnn.tf", "pardnn_builtin_models"},
    {"pardnn.pipeline"},
    {"pardnn.explain", "pardnn.keras"},
    {"pardnn.commands"},
    {"pardnn.cli"},
    {"pardnn.__main__"},
]

# What a package may never reach, directly or through another module: the judge judges
# every placer; a placer is a function of the graph and the cluster (the pipeline lends
# it the emulator); the repair reads the emulation it is handed; tf serves the pipeline.
NEVER = {
    "pardnn.emulator": ("pardnn.placers", "pardnn.repair", "pardnn.pipeline"),
    "pardnn.placers": ("pardnn.repair", "pardnn.emulator", "pardnn.pipeline"),
    "pardnn.repair": ("pardnn.emulator", "pardnn.placers", "pardnn.pipeline"),
    "pardnn.tf": ("pardnn.placers", "pardnn.repair", "pardnn.emulator", "pardnn.pipeline"),
}


def module_name(path: Path) -> str:
    """The module of a source file: its path, but for a package installed from a folder
    of another name (PACKAGE_DIRS: the built-in model scripts sit in models/ at the top
    of the repository, as the design's layout has it, and install as
    pardnn_builtin_models; pardnn/models/ is the Model protocol)."""
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    packages = {folder: package for package, folder in PACKAGE_DIRS.items()}
    parts[0] = packages.get(parts[0], parts[0])
    return ".".join(parts)


def source_modules() -> dict:
    files = sorted((ROOT / "pardnn").rglob("*.py"))
    for folder in PACKAGE_DIRS.values():
        files += sorted((ROOT / folder).glob("*.py"))
    return {module_name(f): f for f in files}


def imports_of(path: Path, known: set) -> set:
    """Project modules `path` imports, at any depth in the file (lazy imports count),
    and, if it imports importlib, the modules its string constants name."""
    found = set()
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # the package itself runs too: its __init__ must not import the importer back
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        else:
            continue
        found |= {n for n in names if n in known}
    return found | (named_modules(tree, known) if uses_importlib(tree) else set())


def uses_importlib(tree) -> bool:
    return any(isinstance(node, ast.Import) and any(a.name.startswith("importlib") for a in node.names)
               or isinstance(node, ast.ImportFrom) and (node.module or "").startswith("importlib")
               for node in ast.walk(tree))


def named_modules(tree, known: set) -> set:
    """The project modules that the string constants of `tree` name ("a.b" or "a.b:attr")."""
    strings = {node.value.split(":")[0] for node in ast.walk(tree)
               if isinstance(node, ast.Constant) and isinstance(node.value, str) and "." in node.value}
    return strings & known


def import_graph() -> nx.DiGraph:
    modules = source_modules()
    graph = nx.DiGraph()
    graph.add_nodes_from(modules)
    for name, path in modules.items():
        graph.add_edges_from((name, dep) for dep in imports_of(path, set(modules)) if dep != name)
    return graph


def layer_of(module: str) -> tuple:
    """(layer index, the layer's package) for a module."""
    for i, layer in enumerate(LAYERS):
        for package in layer:
            if module == package or module.startswith(package + "."):
                return i, package
    raise AssertionError(f"{module} is in no layer of tests/test_layout.py")


def test_no_import_cycles():
    cycles = list(nx.simple_cycles(import_graph()))
    assert cycles == []


def upward_imports(graph) -> list:
    """'module -> module' for each import of a higher layer or a sibling package."""
    upward = []
    for a, b in graph.edges:
        (la, pa), (lb, pb) = layer_of(a), layer_of(b)
        if a == "pardnn" or b == "pardnn":
            continue
        if lb > la or (lb == la and pa != pb):
            upward.append(f"{a} -> {b}")
    return upward


def test_imports_only_run_down_the_pipeline():
    assert upward_imports(import_graph()) == []


def in_package(module: str, packages) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


def forbidden_reaches(graph) -> list:
    """'module -> module' for each module that reaches one NEVER forbids it."""
    return sorted(f"{m} -> {r}" for m in graph for package, banned in NEVER.items()
                  if in_package(m, [package]) for r in nx.descendants(graph, m) if in_package(r, banned))


def test_placers_the_repair_tf_and_the_judge_reach_nothing_they_must_not():
    assert forbidden_reaches(import_graph()) == []


@pytest.mark.parametrize("importer, imported", [
    ("pardnn.placers.etf", "pardnn.repair.overflow_repair"),
    ("pardnn.placers.step1_phases.refinement", "pardnn.emulator.scheduler"),
    ("pardnn.placers.registry", "pardnn.pipeline.portfolio"),
    ("pardnn.tf.replicate", "pardnn.placers.hierarchical"),
    ("pardnn.repair.overflow_repair", "pardnn.emulator.memory"),
])
def test_the_rules_fail_on_a_forbidden_import(importer, imported):
    graph = import_graph()
    graph.add_edge(importer, imported)
    assert f"{importer} -> {imported}" in forbidden_reaches(graph)
    assert f"{importer} -> {imported}" in upward_imports(graph)


def test_tensorflow_is_imported_only_in_tf_keras_and_models():
    offenders = []
    for name, path in source_modules().items():
        if name.startswith(("pardnn.tf", "pardnn.keras", "pardnn_builtin_models", "pardnn.models")):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            mods = ([a.name for a in node.names] if isinstance(node, ast.Import)
                    else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            offenders += [f"{name}: {m}" for m in mods if m.split(".")[0] == "tensorflow"]
    assert offenders == []


def test_setup_cfg_installs_every_package():
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    listed = set(cfg["options"]["packages"].split())
    packages = {module_name(p.parent / "__init__.py") for p in (ROOT / "pardnn").rglob("__init__.py")}
    assert listed == packages | set(PACKAGE_DIRS)
    mapped = dict(line.replace(" ", "").split("=", 1)
                  for line in cfg["options"].get("package_dir", "").splitlines() if line.strip())
    assert mapped == PACKAGE_DIRS          # any other package sits in the folder of its name


def test_the_built_in_models_are_installed_from_the_models_folder():
    """`import pardnn_builtin_models` (the editable install's mapping of setup.cfg's
    package_dir) finds this checkout's models/ folder, and no folder of the old name."""
    import pardnn_builtin_models
    assert Path(pardnn_builtin_models.__file__).resolve() == ROOT / "models" / "__init__.py"
    assert not (ROOT / "pardnn_builtin_models").exists()


@pytest.mark.parametrize("layer", range(len(LAYERS)))
def test_every_layer_exists(layer):
    modules = source_modules()
    for package in LAYERS[layer]:
        assert package in modules, f"{package} is named in LAYERS but not in the tree"


@pytest.mark.parametrize("importer, imported", [
    ("pardnn.cli", "pardnn.commands.place"),
    ("pardnn.placers.registry", "pardnn.placers.etf"),
    ("pardnn.placers.registry", "pardnn.placers.step1"),
    ("pardnn.tf", "pardnn.tf.function"),
    ("pardnn_builtin_models", "pardnn_builtin_models.mlp"),
])
def test_imports_by_name_are_edges(importer, imported):
    assert import_graph().has_edge(importer, imported)


# ------------------------------------------------------------------ module-level caches
# Per-graph state lives with the graph (CostGraph.memo) or a judging context, never in a
# module: a module-level cache outlives its graphs, is shared by every caller, and hides
# what a result depends on. Allowed here, each with why:
MODULE_STATE = {
    "pardnn.pipeline.workers._SHARED": "what forked workers inherit: set before the fork, cleared after",
}
CONTAINERS = {"dict", "list", "set", "defaultdict", "OrderedDict", "Counter"}
WEAK = {"WeakKeyDictionary", "WeakValueDictionary", "WeakSet"}
MUTATORS = {"update", "setdefault", "append", "extend", "add", "clear", "pop", "popitem", "insert",
            "remove", "discard"}


def _called(node) -> str:
    func = node.func if isinstance(node, ast.Call) else None
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""


def module_caches(tree, module: str) -> list:
    """'module.NAME' for each module-level container the module's code mutates (or a weak
    dictionary, or an unbounded functools cache), not in MODULE_STATE."""
    containers = set()
    for stmt in tree.body:
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target] if isinstance(stmt, ast.AnnAssign) else []
        value = getattr(stmt, "value", None)
        if value is None:
            continue
        mutable = isinstance(value, (ast.Dict, ast.List, ast.Set, ast.DictComp, ast.ListComp, ast.SetComp))
        mutable |= _called(value) in CONTAINERS | WEAK
        for target in targets:
            if isinstance(target, ast.Name) and mutable:
                containers.add((target.id, _called(value) in WEAK))
    found = {name for name, weak in containers if weak}
    names = {name for name, _ in containers}
    for node in ast.walk(tree):
        if isinstance(node, ast.Global):
            found |= set(node.names) & names
        elif isinstance(node, (ast.Assign, ast.AugAssign, ast.Delete)):
            for target in getattr(node, "targets", None) or [node.target]:
                if isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name) and target.value.id in names:
                    found.add(target.value.id)
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in MUTATORS
              and isinstance(node.func.value, ast.Name) and node.func.value.id in names):
            found.add(node.func.value.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for deco in node.decorator_list:
                unbounded = _called(deco) == "lru_cache" and any(
                    k.arg == "maxsize" and isinstance(k.value, ast.Constant) and k.value.value is None
                    for k in deco.keywords)
                if unbounded or (isinstance(deco, (ast.Name, ast.Attribute)) and
                                 getattr(deco, "id", getattr(deco, "attr", "")) == "cache"):
                    found.add(node.name)
    return sorted(f"{module}.{name}" for name in found if f"{module}.{name}" not in MODULE_STATE)


def test_no_module_level_caches():
    caches = [c for name, path in source_modules().items() for c in module_caches(ast.parse(path.read_text()), name)]
    assert caches == []


@pytest.mark.parametrize("source", [
    "import weakref\n_SOLVED = weakref.WeakKeyDictionary()\n",
    "_SEEN = {}\ndef f(g):\n    _SEEN[g] = 1\n",
    "_SEEN = []\ndef f(g):\n    _SEEN.append(g)\n",
    "import functools\n@functools.lru_cache(maxsize=None)\ndef f(g):\n    return g\n",
])
def test_a_module_level_cache_is_found(source):
    assert module_caches(ast.parse(source), "m") != []


def test_a_constant_table_is_no_cache():
    assert module_caches(ast.parse('TABLE = {"a": 1}\ndef f():\n    return TABLE["a"]\n'), "m") == []

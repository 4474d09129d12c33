"""Mutation testing of pardnn's core: how many one-token bugs the tests catch.

    python -m tools.mutation MODULE [--tests FILE ...] [--lines A-B] [--sample N] [--list] [--json F]
    python -m tools.mutation --rescore F.json

MODULE is a file or a folder under pardnn/ (`pardnn/repair`, `pardnn/pipeline/judge.py`,
or a dotted name such as `pardnn.emulator.event_loop`). Each of its files is mutated one
token at a time with cosmic-ray's operators (the `mutation` extra of setup.cfg; see
OPERATORS), and for each mutant the tests that cover the module (TESTS, or --tests) run
in a scratch copy of the work tree, stopping at the first failure: of those, only the
tests that ran the mutated statement in one run under coverage (all of them for a
statement run at import, or run by no test in this process). A mutant is killed when
a test fails, errors or runs past the timeout (10 s plus four times what the chosen
tests took unmutated: an endless loop); it survives when they all pass. The score of a file is
killed / (mutants - equivalent), where equivalent mutants are those listed, each with
why, under "Equivalent mutants" in docs/testing.md (a mutant that changes no behaviour
cannot be killed). Prints the commit line, every survivor with its diff line, and one
score line per file.

The checkout itself is never written: mutants live in the scratch copy, so other work
(and other tests) can go on in it. Runs are CPU-heavy and not part of CI; run them under
`nice -n 19`, one module at a time, when you change a core module.

cosmic-ray rather than mutmut: mutmut 3 skips every decorated function, and pardnn's
hot loops (the event loop, Step 1's critical path, the level sweeps, m-ETF, HEFT) are
all `@kernel` functions; it also swaps functions for trampolines that numba cannot
compile. cosmic-ray rewrites the source file itself, so the interpreted and the
compiled path both run the mutant.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tools.commit_line import commit_line, print_commit

ROOT = Path(__file__).resolve().parent.parent

# One alternative per site (the boundary of each comparison, the inverse of each
# arithmetic operator): cosmic-ray's full set replaces each operator by every other
# (11 mutants per `+`), mostly killed by any test that runs the line.
OPERATORS = (
    "core/ReplaceBinaryOperator_Add_Sub", "core/ReplaceBinaryOperator_Sub_Add",
    "core/ReplaceBinaryOperator_Mul_Div", "core/ReplaceBinaryOperator_Div_Mul",
    "core/ReplaceBinaryOperator_FloorDiv_Mul", "core/ReplaceBinaryOperator_Mod_FloorDiv",
    "core/ReplaceBinaryOperator_Pow_Mul",
    "core/ReplaceBinaryOperator_LShift_RShift", "core/ReplaceBinaryOperator_RShift_LShift",
    "core/ReplaceBinaryOperator_BitOr_BitAnd", "core/ReplaceBinaryOperator_BitAnd_BitOr",
    "core/ReplaceBinaryOperator_BitXor_BitOr",
    "core/ReplaceComparisonOperator_Lt_LtE", "core/ReplaceComparisonOperator_LtE_Lt",
    "core/ReplaceComparisonOperator_Gt_GtE", "core/ReplaceComparisonOperator_GtE_Gt",
    "core/ReplaceComparisonOperator_Eq_NotEq", "core/ReplaceComparisonOperator_NotEq_Eq",
    "core/ReplaceComparisonOperator_Is_IsNot", "core/ReplaceComparisonOperator_IsNot_Is",
    "core/ReplaceUnaryOperator_USub_UAdd", "core/ReplaceUnaryOperator_Delete_Not",
    "core/ReplaceTrueWithFalse", "core/ReplaceFalseWithTrue",
    "core/ReplaceAndWithOr", "core/ReplaceOrWithAnd",
    "core/ReplaceBreakWithContinue", "core/ReplaceContinueWithBreak",
    "core/NumberReplacer", "core/ZeroIterationForLoop",
)

# The tests that cover each module (the longest matching prefix wins): the unit tests of
# its own, plus the pipeline tests that run it on small graphs. test_compiled.py is left
# out but for the tests that compare a kernel with its numpy twin (numba is off in the
# runs: NUMBA_DISABLE_JIT), and so are TF tests.
TESTS = {
    "pardnn/repair/": ["tests/test_reference_repair.py", "tests/test_repair.py",
                       "tests/test_repair_parts.py", "tests/test_repair_exact.py"] + [
        f"tests/test_compiled.py::{name}" for name in (
            "test_absorbing_a_groups_buffers", "test_a_move_frees_its_rows_down_their_chains",
            "test_target_preference", "test_consumer_chains", "test_buffers_a_group_would_need",
            "test_rows_a_move_frees", "test_timelines_filled_as_numpy_rows_fill_them", "test_move_costs",
            "test_grid_positions", "test_footprint_rows_by_group",
            "test_memory_tracking_and_the_repair_as_numpy_runs_them")],
    "pardnn/pipeline/judge.py": ["tests/test_reference_repair.py", "tests/test_repair.py",
                                 "tests/test_event_loop.py",
                                 "tests/test_fit.py::test_a_trial_surely_fits_only_where_the_tracked_peak_fits",
                                 "tests/test_fit.py::test_the_judge_rejects_a_trial_no_repair_can_fit",
                                 "tests/test_fit.py::test_a_candidate_without_its_profile_tracks_the_same_one_again",
                                 "tests/test_fit.py::test_refining_with_memory_to_spare_tracks_memory_once_with_the_same_result"],
    "pardnn/pipeline/choice.py": ["tests/test_choice.py"],     # its rules on hand-made judged results: all 94 in minutes
    # the executor on 150-node graphs, with and without workers and a budget: seconds, where
    # tests/test_stages.py and tests/test_determinism.py (which cover it too) take minutes
    "pardnn/pipeline/portfolio.py": ["tests/test_portfolio.py"],
    "pardnn/pipeline/lanes.py": ["tests/test_lanes.py"],
    "pardnn/repair/local_search.py": ["tests/test_local_search.py"],
    "pardnn/repair/least_memory.py": ["tests/test_least_memory.py"],
    "pardnn/pipeline/capacity.py": ["tests/test_capacity_parts.py", "tests/test_capacity.py"],   # the latter 35 s     # its bounds against placements and brute force     # (tests/test_repair.py runs it in the repair)
    # in-process Keras builds (TF tests: each mutant's run imports TensorFlow afresh)
    "pardnn/keras/matching.py": ["tests/test_keras_matching.py"],
    "pardnn/emulator/event_loop.py": ["tests/test_reference_event_loop.py", "tests/test_event_loop.py",
                                      "tests/test_emulator_scheduler.py"],
    "pardnn/emulator/memory.py": ["tests/test_emulator_memory.py", "tests/test_repair_parts.py",
                                  "tests/test_repair.py", "tests/test_compiled.py::test_memory_buffers",
                                  "tests/test_compiled.py::test_memory_timelines",
                                  "tests/test_compiled.py::test_timelines_filled_as_numpy_rows_fill_them",
                                  "tests/test_compiled.py::test_memory_tracking_and_the_repair_as_numpy_runs_them"],
    "pardnn/placers/step1_phases/": ["tests/test_reference_step1.py", "tests/test_partition.py",
                                     "tests/test_swapping.py", "tests/test_affinity.py",
                                     "tests/test_fenwick.py", "tests/test_first_gap.py"],
    "pardnn/graph/costgraph_json.py": ["tests/test_costgraph_json.py", "tests/test_bad_input.py"],
}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("module", nargs="?", help="a file or folder under pardnn/, or a dotted name")
    parser.add_argument("--rescore", metavar="F.json",
                        help="score a run's --json file again against docs/testing.md's equivalent mutants")
    parser.add_argument("--tests", nargs="+", help="test files to run (default: TESTS)")
    parser.add_argument("--lines", help="A-B: mutate only these lines (with one file)")
    parser.add_argument("--sample", type=int, default=1, metavar="N",
                        help="run every Nth mutant of each file only (a score estimated on a sample)")
    parser.add_argument("--list", action="store_true", help="list the mutants, run nothing")
    parser.add_argument("--json", help="write every mutant's outcome to this file")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))     # `kill` still removes the scratch copy
    if args.rescore:
        return rescore(args.rescore)
    if not args.module:
        parser.error("give a MODULE (or --rescore F.json)")
    files = module_files(args.module)
    lines = tuple(int(x) for x in args.lines.split("-")) if args.lines else None
    print_commit()
    print(f"# command: python -m tools.mutation {' '.join(argv if argv is not None else sys.argv[1:])}")
    equivalent = equivalent_mutants()
    results, scores = [], []
    by_file = {path: [m for m in enumerate_mutants(path)
                      if lines is None or lines[0] <= m["line"] <= lines[1]][::args.sample] for path in files}
    if args.list:
        for m in (m for mutants in by_file.values() for m in mutants):
            print(f"{m['file']}:{m['line']} {m['operator']}: {m['after']}")
        return 0
    tests = args.tests or tests_for(files[0])
    preload()
    for path, outcomes in run_mutants(by_file, tests).items():
        for m in outcomes:
            m["equivalent"] = equivalent.get(mutant_key(m))
        results += outcomes
        scores.append(report(path, outcomes, tests))
    if args.json:
        Path(args.json).write_text(json.dumps({"commit": commit_line(), "mutants": results}, indent=1))
    for line in scores:
        print(line)
    return 0


def rescore(path) -> int:
    """Prints the score lines of a run's --json file, its equivalent mutants read anew."""
    run = json.loads(Path(path).read_text())
    equivalent = equivalent_mutants()
    print(f"# {run['commit']}; equivalent mutants as docs/testing.md lists them now")
    by_file = {}
    for m in run["mutants"]:
        m["equivalent"] = equivalent.get(mutant_key(m))
        by_file.setdefault(m["file"], []).append(m)
    lines = [report(file, outcomes, []) for file, outcomes in by_file.items()]
    print("\n".join(lines))
    return 0


def module_files(module: str) -> list:
    """The .py files (relative to the root) that MODULE names, in order."""
    name = module.replace(".", "/") if not module.endswith(".py") and "/" not in module else module
    path = ROOT / name
    if path.is_dir():
        return sorted(str(p.relative_to(ROOT)) for p in path.glob("*.py") if p.name != "__init__.py")
    if not path.suffix:
        path = path.with_suffix(".py")
    if not path.is_file():
        raise SystemExit(f"mutation: {module}: no such module")
    return [str(path.relative_to(ROOT))]


def tests_for(path: str) -> list:
    prefixes = [p for p in TESTS if path.startswith(p)]
    if not prefixes:
        raise SystemExit(f"mutation: no tests listed for {path} in tools/mutation.py TESTS; pass --tests")
    return [t for t in TESTS[max(prefixes, key=len)] if (ROOT / t.split("::")[0]).exists()]


def enumerate_mutants(path: str) -> list:
    """Every mutant of one file: {file, operator, occurrence, line, before, after, code}."""
    from cosmic_ray.ast import get_ast
    from cosmic_ray.mutating import mutate_code
    from cosmic_ray.plugins import get_operator

    source = (ROOT / path).read_text()
    original = source.splitlines()
    mutants = []
    for name in OPERATORS:
        operator = get_operator(name)()
        counter = _Count(operator)
        counter.walk(get_ast(source))
        for occurrence in range(counter.count):
            code = mutate_code(source, operator, occurrence)
            if code is None or code == source:
                continue
            changed = [(i, a, b) for i, (a, b) in enumerate(zip(original, code.splitlines())) if a != b]
            line, before, after = changed[0] if changed else (0, "", "")
            mutants.append({"file": path, "operator": name, "occurrence": occurrence, "line": line + 1,
                            "before": before.strip(), "after": after.strip(), "code": code})
    return sorted(mutants, key=lambda m: (m["line"], m["operator"], m["occurrence"]))


def _Count(operator):
    """A cosmic-ray visitor that counts the sites where `operator` applies."""
    from cosmic_ray.ast import Visitor

    class Count(Visitor):
        count = 0

        def visit(self, node):
            self.count += len(list(operator.mutation_positions(node)))
            return node

    return Count()


def run_mutants(by_file: dict, tests: list) -> dict:
    """{file: its mutants with outcome and seconds}: against each mutant, in a scratch
    copy, the tests that run its line (found by one run of all `tests` under coverage,
    each test its own context, for every file at once; all of them for a line run at
    import or by no test in this process)."""
    with tempfile.TemporaryDirectory(prefix="pardnn-mutation-") as scratch:
        scratch = Path(scratch)
        copy_tree(scratch)
        # numba off: a kernel's `.compiled` runs its source as Python, so the tests that
        # compare a kernel on a large graph with its numpy twin (tests/test_compiled.py)
        # see the mutant without a compilation per mutant
        os.environ.update(PYTHONDONTWRITEBYTECODE="1", NUMBA_CACHE_DIR=str(scratch / ".numba"),
                          NUMBA_DISABLE_JIT="1")
        args = ["-x", "-q", "-p", "no:cacheprovider", "-n", "0"]    # in this process: coverage maps it
        t0 = time.perf_counter()
        rc = run_tests(scratch, args + tests, None, verbose=True, measure=[scratch / p for p in by_file])
        baseline = time.perf_counter() - t0
        if rc != 0:
            raise SystemExit(f"mutation: the tests fail unmutated (pytest exit {rc})")
        seconds = json.loads((scratch / ".coverage-map.seconds").read_text())
        print(f"{sum(map(len, by_file.values()))} mutants in {len(by_file)} files; tests {' '.join(tests)} "
              f"take {baseline:.1f} s unmutated (under coverage)", flush=True)
        done = {}
        for path, mutants in by_file.items():
            target = scratch / path
            original = target.read_text()
            covering = tests_by_line(scratch / ".coverage-map", target, original)
            done[path] = [_run_one(scratch, target, original, m, covering, seconds, tests, baseline, args)
                          for m in mutants]
            print(f"  {path}: {len(mutants)} run", flush=True)
        return done


def _run_one(scratch, target, original, m, covering, seconds, tests, baseline, args) -> dict:
    """One mutant written over `target`, its tests run, the file restored: its outcome."""
    target.write_text(m["code"])
    shutil.rmtree(scratch / ".numba", ignore_errors=True)
    t0 = time.perf_counter()
    chosen = sorted(covering[m["line"]], key=seconds.get) if m["line"] in covering else tests
    timeout = 10.0 + 4 * (sum(seconds.get(t, 0.0) for t in chosen) if m["line"] in covering else baseline)
    try:
        rc = run_tests(scratch, args + chosen, timeout, limits=seconds)
    finally:
        target.write_text(original)
    out = {k: v for k, v in m.items() if k != "code"}
    out.update(outcome="survived" if rc == 0 else "killed", seconds=round(time.perf_counter() - t0, 1),
               tests=len(covering[m["line"]]) if m["line"] in covering else "all")
    return out


def tests_by_line(data_file: Path, target: Path, source: str) -> dict:
    """{line: [test node ids that ran the statement holding it]}, for the lines whose
    statement only tests ran (not the module's import)."""
    import ast

    import coverage

    data = coverage.CoverageData(str(data_file))
    data.read()
    ran = data.contexts_by_lineno(str(target))
    spans = sorted(((n.lineno, n.end_lineno) for n in ast.walk(ast.parse(source)) if isinstance(n, ast.stmt)),
                   key=lambda s: s[1] - s[0])
    out = {}
    for line in range(1, source.count("\n") + 2):
        first = next((a for a, b in spans if a <= line <= b), None)
        contexts = ran.get(first, [])
        if contexts and "" not in contexts:
            out[line] = sorted(contexts)
    return out


def run_tests(scratch: Path, args: list, timeout, verbose=False, measure=None, limits=None) -> int:
    """pytest's exit status for `args` run in the scratch copy, in a child forked from
    this process (which has imported the heavy libraries, never pardnn, so the child
    imports the mutant fresh); -1 when it runs past `timeout` seconds (an endless loop
    is caught too). With `measure` (files), the lines of them each test runs are
    recorded in scratch/.coverage-map, each test under its node id. With `limits`
    ({node id: seconds it took unmutated}), a test running past 2 s plus five times
    that fails at once (`_TestTimeouts`)."""
    pid = os.fork()
    if pid == 0:                                   # the child: never returns
        rc = 3
        try:
            os.setpgid(0, 0)                       # its own group, so a timeout ends all of it
            os.chdir(scratch)
            sys.path[:] = [str(scratch)] + [p for p in sys.path if p not in ("", str(ROOT))]
            if not verbose:
                devnull = os.open(os.devnull, os.O_WRONLY)
                os.dup2(devnull, 1)
                os.dup2(devnull, 2)
            import pytest
            if measure is None:
                rc = int(pytest.main(args, plugins=[_TestTimeouts(limits or {})]))
            else:
                import coverage
                cov = coverage.Coverage(data_file=str(scratch / ".coverage-map"), include=[str(p) for p in measure])
                cov.start()
                contexts = _TestContexts(cov)
                rc = int(pytest.main(args, plugins=[contexts]))
                cov.stop()
                cov.save()
                (scratch / ".coverage-map.seconds").write_text(json.dumps(contexts.seconds))
        finally:
            os._exit(rc)
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        if deadline is not None and time.monotonic() > deadline:
            os.killpg(pid, 9)
            os.waitpid(pid, 0)
            return -1
        time.sleep(0.02)


class _TestTimeouts:
    """A pytest plugin: a test that runs far longer than it did unmutated (an endless
    loop) raises TimeoutError, so the mutant is killed without waiting for the run's
    own timeout."""

    def __init__(self, limits):
        self.limits = limits

    @staticmethod
    def _expired(signum, frame):
        raise TimeoutError("the mutant made this test run far longer than unmutated")

    def pytest_runtest_setup(self, item):
        signal.signal(signal.SIGALRM, self._expired)
        signal.setitimer(signal.ITIMER_REAL, 2.0 + 5 * self.limits.get(item.nodeid, 10.0))

    def pytest_runtest_teardown(self, item):
        signal.setitimer(signal.ITIMER_REAL, 0)


class _TestContexts:
    """A pytest plugin: coverage records what each test runs under its node id."""

    def __init__(self, cov):
        self.cov, self.seconds, self.t0 = cov, {}, 0.0

    def pytest_runtest_setup(self, item):
        self.cov.switch_context(item.nodeid)
        self.t0 = time.perf_counter()

    def pytest_runtest_teardown(self, item):
        self.seconds[item.nodeid] = time.perf_counter() - self.t0
        self.cov.switch_context("")


def preload() -> None:
    """Imports the libraries every test run needs, so each forked run starts warm."""
    import hypothesis  # noqa: F401
    import networkx  # noqa: F401
    import numpy  # noqa: F401
    import ortools.sat.python.cp_model  # noqa: F401
    import pytest  # noqa: F401


def copy_tree(dest: Path) -> None:
    """The work tree's files that git knows or would add (not .venv or caches)."""
    listed = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others",
                             "--exclude-standard"], capture_output=True, check=True).stdout
    for name in filter(None, listed.decode().split("\0")):
        src = ROOT / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)


def mutant_key(m: dict) -> tuple:
    return (m["file"], m["operator"].removeprefix("core/"), m["before"], m["after"])


def equivalent_mutants() -> dict:
    """{(file, operator, line before, line after): why} from the table under
    "Equivalent mutants" in docs/testing.md (columns: file:line, operator, the line, the
    mutant, why; the lines in backticks, a `|` in them escaped as `\\|`)."""
    doc = ROOT / "docs" / "testing.md"
    if not doc.exists():
        return {}
    table, rows = False, {}
    for line in doc.read_text().splitlines():
        if line.startswith("#"):
            table = "Equivalent mutants" in line
            continue
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))] \
            if table and line.startswith("|") else []
        if len(cells) == 5 and cells[0].startswith("pardnn/"):
            where, operator, before, after, why = (re.sub(r"^`+ ?| ?`+$", "", c) for c in cells)
            rows[(where.split(":")[0], operator, before.replace("\\|", "|"), after.replace("\\|", "|"))] = why
    return rows


def report(path: str, outcomes: list, tests: list) -> str:
    killed = sum(m["outcome"] == "killed" for m in outcomes)
    equivalent = sum(m["outcome"] == "survived" and bool(m["equivalent"]) for m in outcomes)
    counted = len(outcomes) - equivalent
    score = 100.0 * killed / counted if counted else 100.0
    for m in outcomes:
        if m["outcome"] == "survived" and not m["equivalent"]:
            print(f"  SURVIVED {m['file']}:{m['line']} {m['operator']}\n    - {m['before']}\n    + {m['after']}")
    return (f"{path}: {killed} of {counted} non-equivalent mutants killed ({score:.1f}%), "
            f"{equivalent} equivalent, {len(outcomes)} in all")


if __name__ == "__main__":
    sys.exit(main())

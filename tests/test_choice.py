"""The portfolio's rules (pardnn.pipeline.choice) on hand-made judged results: which
candidates are finalists, which are refined, and which is kept."""

import ast
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from pardnn.base.errors import UserError
from pardnn.graph import CostGraph
from pardnn.hardware import parse_devices
from pardnn.pipeline import choice
from pardnn.pipeline.choice import Judgement as J
from pardnn.placers import registry
from pardnn.repair.overflow_repair import Stuck
from tools.synth_graph import synth_graph

ORDER = ["step1", "stages", "etf", "heft", "metis"]


def test_finalists_are_the_two_fastest_the_earlier_on_a_tie():
    judged = {"step1": J(120, 0, 0), "stages": J(100, 0, 1), "etf": J(100, 0, 1), "heft": J(150, 0, 0)}
    assert choice.finalists(judged, 1000, ORDER) == ["stages", "etf"]


def test_a_candidate_whose_repair_moved_too_much_is_a_finalist_only_if_all_did():
    judged = {"step1": J(120, 0, 0), "stages": J(90, 101, 2), "etf": J(110, 100, 2)}
    assert choice.finalists(judged, 1000, ORDER) == ["etf", "step1"]     # 101 > 10% of 1000
    assert choice.finalists({"stages": J(90, 500, 2), "etf": J(110, 900, 2)}, 1000, ORDER) == ["stages", "etf"]


def test_two_candidates_that_place_alike_are_one_finalist():
    judged = {"stages": J(100, 0, 0, digest="a"), "stages-live": J(100, 0, 0, digest="a"),
              "metis": J(105, 0, 0, digest="b")}
    assert choice.finalists(judged, 1000, ["stages", "stages-live", "metis"]) == ["stages", "metis"]
    judged["stages-live"] = J(100, 0, 0, digest="c")                  # another placement: refined too
    assert choice.finalists(judged, 1000, ["stages", "stages-live", "metis"]) == ["stages", "metis", "stages-live"]


def test_the_two_stage_folds_count_as_one_finalist_and_are_refined_together():
    order = ["step1", "stages", "stages-live", "etf", "metis"]
    judged = {"stages": J(100, 0, 0, digest="a"), "stages-live": J(101, 0, 0, digest="b"),
              "metis": J(102, 0, 0, digest="c"), "etf": J(103, 0, 0, digest="d")}
    assert choice.finalists(judged, 1000, order) == ["stages", "metis", "stages-live"]
    judged["metis"] = J(99, 0, 0, digest="c")                           # a fold second: the other fold too
    assert choice.finalists(judged, 1000, order) == ["metis", "stages", "stages-live"]
    judged["stages-live"] = J(101, 500, 3, digest="b")                  # its repair moved too much
    assert choice.finalists(judged, 1000, order) == ["metis", "stages"]
    no_fold = {"metis": J(99, 0, 0, digest="c"), "etf": J(98, 0, 0, digest="d"), "stages-live": J(150, 0, 0)}
    assert choice.finalists(no_fold, 1000, order) == ["etf", "metis"]


def test_step1_as_it_is_is_not_refined_again_and_drops_the_runner_up_on_large_graphs():
    judged = {"step1": J(100, 0, 0), "etf": J(120, 0, 1)}
    large = choice.refinements(judged, 401, ORDER)
    assert large.finalists == ["step1"] and large.refine == []
    small = choice.refinements(judged, 400, ORDER)           # RUNNER_UP_MAX_NODES: the runner-up may win
    assert small.finalists == ["step1", "etf"] and small.refine == ["etf"]
    repaired = {"step1": J(100, 5, 1), "etf": J(120, 0, 1)}  # Step 1's repair moved nodes: refined too
    assert choice.refinements(repaired, 5000, ORDER).refine == ["step1", "etf"]


def test_a_portfolio_of_one_refines_nothing():
    assert choice.refinements({"etf": J(100, 3, 1)}, 50, ["etf"]) == (["etf"], [])


def test_refine_first_only_when_the_runner_up_is_step1_as_it_is():
    assert choice.refine_first({"heft": J(90, 0, 1), "step1": J(100, 0, 0)}, 5000, ORDER) == "heft"
    assert choice.refine_first({"heft": J(90, 0, 1), "etf": J(100, 0, 1)}, 5000, ORDER) is None
    assert choice.refine_first({"step1": J(90, 0, 0), "heft": J(100, 0, 1)}, 5000, ORDER) is None
    assert choice.refine_first({"heft": J(90, 0, 1)}, 5000, ORDER) is None


def test_the_winner_is_the_faster_after_refinement_the_first_finalist_on_a_tie():
    assert choice.winner({"etf": 95.0, "step1": 100.0}, ["step1", "etf"]) == "etf"
    assert choice.winner({"etf": 100.0, "step1": 100.0}, ["step1", "etf"]) == "step1"


def test_roles_extras_only_on_small_graphs_and_hosts_only_on_several():
    one, two = parse_devices("cpu:4"), parse_devices("2xcpu:2")
    small = choice.roles("pardnn", synth_graph(500, seed=0), one)
    assert small.first == "step1" and "hier" not in small.beside and "topo" in small.beside
    assert "hier" in choice.roles("pardnn", synth_graph(500, seed=0), two).beside
    big = choice.roles("pardnn", synth_graph(20_000, seed=0), one)
    assert "topo" not in big.beside and "topo" in big.extra and "exact" not in big.order
    ranks = [r for r in (choice.registry.PLACERS[n].build_rank for n in big.beside)]
    assert ranks == sorted(ranks, reverse=True)                       # the slowest first
    assert choice.roles("etf", synth_graph(50, seed=0), one) == (["etf"], "etf", [], [])


def test_the_extras_are_built_only_when_none_fits():
    roles = choice.Roles(["step1", "stages", "topo", "single"], "step1", ["stages"], ["topo", "single"])
    assert choice.fallback_extras({"step1": False, "stages": True}, roles) == []
    assert choice.fallback_extras({"step1": False, "stages": False}, roles) == ["topo", "single"]
    assert choice.fallback_extras({"step1": False, "topo": False}, roles) == ["single"]   # built already


def stuck(overflow):
    return Stuck("memory: stuck", overflow)


def test_the_closest_stuck_are_searched_in_turn_until_one_fits():
    errors = {"step1": stuck(300), "stages": None, "etf": stuck(100), "heft": UserError("memory: no"),
              "metis": stuck(100), "topo": stuck(50)}
    assert choice.closest_stuck(errors) == ["topo", "etf"]      # the fewest bytes over; the earlier on ties
    assert choice.SEARCHED == 2
    none_fits = {name: False for name in errors}
    assert choice.next_search(none_fits, errors, {}) == "topo"
    assert choice.next_search(none_fits, errors, {"topo": None}) == "etf"
    assert choice.next_search(none_fits, errors, {"topo": None, "etf": None}) is None   # SEARCHED tried
    assert choice.next_search({**none_fits, "topo": True}, errors, {"topo": None}) is None  # one fits
    assert choice.next_search({**none_fits, "stages": True}, errors, {}) is None           # fit without
    assert choice.next_search({"heft": False}, {"heft": UserError("memory: no")}, {}) is None


def test_step1_is_named_by_its_registry_fields_not_its_name(monkeypatch):
    firsts = [n for n, p in registry.PLACERS.items() if p.role == registry.FIRST]
    assert firsts == ["step1"] and [n for n, p in registry.PLACERS.items() if p.refines_itself] == ["step1"]
    assert choice.refinable("step1", J(100, 0, 0)) is False and choice.refinable("etf", J(100, 0, 0))
    monkeypatch.setitem(registry.PLACERS, "etf", registry.PLACERS["etf"]._replace(refines_itself=True))
    monkeypatch.setitem(registry.PLACERS, "step1", registry.PLACERS["step1"]._replace(refines_itself=False))
    assert choice.refinable("etf", J(100, 0, 0)) is False and choice.refinable("etf", J(100, 3, 1))
    assert choice.refinable("step1", J(100, 0, 0))
    assert choice.refine_first({"heft": J(90, 0, 1), "etf": J(100, 0, 0)}, 5000, ORDER) == "heft"


def module_tree(name):
    return ast.parse((Path(__file__).resolve().parents[1] / "pardnn" / "pipeline" / name).read_text())


def test_the_executor_makes_no_choice():
    """docs/architecture.md: portfolio.py decides only where jobs run and how long;
    the rules are choice.py's. Its module constants are durations (seconds, `_S`), it
    names no candidate (a registry name as a string) and defines no rule of choice.py."""
    tree = module_tree("portfolio.py")
    constants = [t.id for node in tree.body if isinstance(node, ast.Assign) for t in node.targets
                 if isinstance(t, ast.Name) and t.id.isupper() and isinstance(node.value, ast.Constant)]
    assert constants and all(name.endswith("_S") for name in constants), constants
    strings = {node.value for node in ast.walk(tree) if isinstance(node, ast.Constant) and isinstance(node.value, str)}
    assert not strings & set(registry.PLACERS)
    defined = {node.name for node in tree.body if isinstance(node, (ast.FunctionDef, ast.ClassDef))}
    rules = {node.name for node in module_tree("choice.py").body if isinstance(node, ast.FunctionDef)}
    assert not defined & rules


def test_the_rules_use_no_pool_clock_or_io():
    """docs/architecture.md: choice.py's rules are pure functions of the judged results."""
    tree = module_tree("choice.py")
    imported = {name for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))
                for alias in node.names for name in ([alias.name.split(".")[0]] if isinstance(node, ast.Import)
                                                     else [node.module, f"{node.module}.{alias.name}"])}
    assert not imported & {"time", "os", "concurrent", "multiprocessing", "threading", "pardnn.pipeline.workers",
                           "pardnn.pipeline.portfolio", "pardnn.io", "pathlib", "datetime"}
    calls = {node.func.id for node in ast.walk(tree) if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)}
    assert "open" not in calls and "print" not in calls


def chain(n):
    """A chain of n nodes of 1 us each."""
    return CostGraph.build(names=[f"n{i}" for i in range(n)], comp_us=np.ones(n), out_bytes=np.zeros(n, np.int64),
                           edge_src=np.arange(n - 1), edge_dst=np.arange(1, n))


def test_the_extras_are_built_beside_the_others_below_extras_max_nodes_only():
    one = parse_devices("cpu:4")
    assert choice.EXTRAS_MAX_NODES == 20_000
    below = choice.roles("pardnn", chain(19_999), one)
    at = choice.roles("pardnn", chain(20_000), one)
    assert "topo" in below.beside and "topo" in below.extra
    assert "topo" not in at.beside and "topo" in at.extra


def test_a_portfolio_of_two_refines_both_finalists():
    both = choice.refinements({"etf": J(100, 0, 1), "heft": J(110, 0, 1)}, 5000, ["etf", "heft"])
    assert both == (["etf", "heft"], ["etf", "heft"])


def judged_on(device, makespan=100.0, moved=(), rounds=0):
    """What Judgement.of reads of a judge.Judged."""
    moved = np.isin(np.arange(len(device)), moved)
    return SimpleNamespace(device=np.asarray(device), schedule=SimpleNamespace(makespan=makespan),
                           moved=moved, rounds=rounds)


def test_a_judgement_says_whether_the_placement_leaves_the_slower_devices_out():
    gpus_and_host = parse_devices("dgx-h100:2+host")                   # the host (device 2) is slower
    assert gpus_and_host.tiers.tolist() == [0, 0, 1]
    on_gpus, on_host = judged_on([0, 1, 1, 0], 90.0, moved=[1, 2], rounds=2), judged_on([0, 2, 1, 0])
    assert choice.Judgement.of(on_gpus, gpus_and_host)[:4] == (90.0, 2, 2, True)
    assert choice.Judgement.of(on_host, gpus_and_host).fastest_only is False
    assert choice.Judgement.of(on_host).fastest_only is True            # no cluster: taken as alike
    assert choice.Judgement.of(judged_on([0, 3, 2]), parse_devices("cpu:4")).fastest_only is True
    assert choice.Judgement.of(on_gpus).digest == choice.Judgement.of(judged_on([0, 1, 1, 0])).digest
    assert choice.Judgement.of(on_gpus).digest != choice.Judgement.of(on_host).digest


def test_the_second_finalist_is_the_fastest_on_the_fastest_devices_alone():
    order = ["etf", "heft", "metis", "stages"]
    host = {"etf": J(100, 0, 0, fastest_only=False), "heft": J(110, 0, 0, fastest_only=False)}
    assert choice.finalists({**host, "metis": J(120, 0, 0), "stages": J(130, 0, 0)}, 1000, order) == ["etf", "metis"]
    assert choice.finalists(host, 1000, order) == ["etf", "heft"]      # none on the fastest alone


def test_refine_first_reads_the_first_finalist_and_the_runner_up(monkeypatch):
    """The fastest is refined early when it is refinable and the runner-up is not: read
    of the runner-up (not of a third finalist, the other stage fold) and each of its own
    judgement, here with the two folds taken as placers that refine themselves."""
    order = ["step1", "heft", "stages", "stages-live"]
    assert choice.refine_first({"heft": J(90, 0, 0), "step1": J(100, 0, 0)}, 5000, order) == "heft"
    for fold in choice.FOLDS:
        monkeypatch.setitem(registry.PLACERS, fold, registry.PLACERS[fold]._replace(refines_itself=True))
    folds = {"stages": J(100, 0, 0, digest="a"), "stages-live": J(101, 0, 0, digest="b")}
    assert choice.finalists({"heft": J(90, 0, 0), **folds}, 5000, order) == ["heft", "stages", "stages-live"]
    assert choice.refine_first({"heft": J(90, 0, 0), **folds}, 5000, order) == "heft"
    assert choice.refine_first({"step1": J(90, 0, 1), **folds}, 5000, order) == "step1"
    assert choice.refine_first({"step1": J(90, 0, 0), **folds}, 5000, order) is None

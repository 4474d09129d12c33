"""`pardnn capacity` (pardnn.commands.capacity, pardnn.pipeline.capacity): the least
memory per device count against the exhaustive optimum on small graphs, what it
writes, that it is deterministic, and its one-line refusals."""

import json
import os

import numpy as np
import pytest

from tools.bench_exact_fit import random_case, tightest
from tools.synth_graph import synth_graph

from pardnn.cli import main
from pardnn.pipeline.report import evaluate
from pardnn.graph import RESIDUAL, CostGraph
from pardnn.hardware import parse_devices
from pardnn.pipeline import capacity as capacity_module
from pardnn.pipeline.capacity import Feasibility, capacity, first_devices
from pardnn.pipeline.portfolio import build
from pardnn.placers import registry


def small_cases():
    for i in range(40):
        rng = np.random.default_rng([7, i])
        graph, k = random_case(rng)
        if k ** (graph.num_groups - 1) <= 800:
            yield pytest.param(graph, k, id=f"case{i}")


@pytest.mark.parametrize("graph, k", list(small_cases())[:6])
def test_the_least_memory_is_within_the_tolerance_of_the_best_placement(graph, k):
    """The least highest peak over every placement (found by trying them all) is what
    pardnn fits in on these graphs (its repair searches them all), so the bisection
    lands at most TOLERANCE above it, or at most NEAR_BOUND above the bound."""
    best = tightest(graph, k)
    cluster = parse_devices(f"cpu:{k}").with_options(memory=4 * best + 64, reserve=0.0, latency=1.0,
                                                     bandwidth=1e6)
    row = capacity(graph, cluster, [k])[0]
    near = (1 + capacity_module.NEAR_BOUND) * row.bound.bytes
    assert best <= row.least.memory <= max(best + max(1, int(capacity_module.TOLERANCE * row.least.memory)), near)
    assert row.bound.bytes <= best
    assert max(row.least.report.peak_memory_bytes) <= row.least.memory


def test_one_device_needs_its_whole_peak():
    g = synth_graph(200, seed=5, shape="chain")
    one = parse_devices("cpu:1").with_options(memory=2**50)
    peak = evaluate(g, one, np.zeros(g.num_nodes, np.int32)).peak_memory_bytes[0]
    row = capacity(g, parse_devices("cpu:2").with_options(memory=2**50, reserve=0.0), [1])[0]
    assert row.least.memory == peak and row.checks == 0


def test_placers_that_read_no_memory_place_alike_at_any_memory():
    g = synth_graph(300, seed=3, shape="dag")
    roomy = parse_devices("cpu:3").with_options(memory=2**50)
    tight = parse_devices("cpu:3").with_options(memory=10**6)
    for name, placer in registry.PLACERS.items():
        if not placer.reads_memory and name != "exact":
            assert np.array_equal(build(g, roomy, name), build(g, tight, name)), name


def test_feasibility_builds_memory_blind_candidates_once(monkeypatch):
    g = synth_graph(300, seed=3, shape="chain")
    cluster = parse_devices("cpu:2").with_options(memory=2**40, reserve=0.0)
    built = []
    real = capacity_module.build
    monkeypatch.setattr(capacity_module, "build", lambda graph, c, name: built.append(name) or real(graph, c, name))
    f = Feasibility(g, cluster, "pardnn")
    assert f.fits(2**40) and f.fits(2**39)
    assert built.count("step1") == 1 and f.last == "step1"


def write_graph(tmp_path, graph):
    path = tmp_path / "g.json"
    graph.to_json(path)
    return str(path)


def test_capacity_writes_the_table_json_plot_and_a_placement_per_count(tmp_path, capsys, monkeypatch):
    g = synth_graph(80, seed=2, shape="chain")
    path, out = write_graph(tmp_path, g), tmp_path / "cap"
    one = parse_devices("cpu:1").with_options(memory=2**50)
    peak = evaluate(g, one, np.zeros(g.num_nodes, np.int32)).peak_memory_bytes[0]
    memory = str(int(peak * 0.6))
    argv = ["capacity", path, "--devices", "cpu:3", "--memory", memory, "--reserve", "0.1", "-o", str(out)]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "fewest devices that fit" in printed and "least memory" in printed
    doc = json.loads((out / "capacity.json").read_text())
    assert [r["devices"] for r in doc["rows"]] == [1, 2, 3]
    assert (out / "capacity.png").stat().st_size > 1000
    first = None
    for r in doc["rows"]:
        assert r["least_memory_bound_bytes"] <= r["least_memory_bytes"]
        placed = out / r["placement"]["dir"]
        report = json.loads((placed / "report.json").read_text())
        assert (placed / "placement.csv").exists() and report["feasible"]
        assert (placed / ".pardnn-output.json").exists()            # a placed dir of its own
        inputs = json.loads((placed / "inputs.json").read_text())
        assert inputs["devices"] == f"cpu:{r['devices']}" and inputs["memory"] == str(r["placement"]["memory_bytes"])
        usable = int(r["placement"]["memory_bytes"] * 0.9)
        assert max(report["peak_memory_bytes"]) <= usable
        assert r["step_lower_bound_us"] == report["lower_bound_us"] <= r["step_us_at_least_memory"]
        if r["fits_at_memory"]:
            first = first or r["devices"]
            assert r["placement"]["memory_bytes"] == int(memory)
            assert r["speedup_at_memory"] == pytest.approx(doc["single_device_us"] / r["step_us_at_memory"])
    assert doc["rows"][0]["fits_at_memory"] is False and doc["fewest_devices"] == first
    manifests = {p.relative_to(out): p.read_text() for p in out.rglob(".pardnn-output.json")}
    # the same again, the counts side by side, each writing its placed dir in its lane:
    # the same answer and files (seconds aside)
    from pardnn.pipeline import lanes
    monkeypatch.setattr(lanes, "PARALLEL_MIN_NODES", 0)
    monkeypatch.setattr(lanes, "_shares", lambda jobs: [[cpu] for cpu in sorted(os.sched_getaffinity(0))[:1]] * 2)
    assert main(argv) == 0
    again = json.loads((out / "capacity.json").read_text())
    assert [dict(r, seconds=0) for r in again["rows"]] == [dict(r, seconds=0) for r in doc["rows"]]
    assert {p.relative_to(out): p.read_text() for p in out.rglob(".pardnn-output.json")} == manifests
    assert len(manifests) == 4


def test_capacity_refuses_one_device_a_group_too_large_and_bad_counts(tmp_path, capsys):
    g = CostGraph.build(names=["w", "m"], comp_us=[0, 1], out_bytes=[5000, 10], kind=[RESIDUAL, 0],
                        edge_src=["w"], edge_dst=["m"], edge_bytes=[5000])
    path = write_graph(tmp_path, g)
    cases = [(["--devices", "cpu:1"], "--devices: capacity compares device counts, and this cluster has one device"),
             (["--devices", "cpu:4", "--memory", "4000", "--reserve", "0"],
              "--memory: the colocation group of 'w' (1 nodes) holds 4.88 KiB, more than the largest device's "
              "3.91 KiB usable"),
             (["--devices", "cpu:4", "--memory", "5000", "--reserve", "0"],
              "--memory: 4.88 KiB usable per device (memory minus the 0% reserve) is too little for any "
              "placement, which needs at least 4.89 KiB per device (largest op working set: op 'm')"),
             (["--devices", "cpu:4", "--counts", "0,2"], "--counts: each count must be 1 to 4"),
             (["--devices", "cpu:4", "--counts", "2,x"], "--counts: give device counts separated by commas")]
    for flags, message in cases:
        assert main(["capacity", path, *flags, "-o", str(tmp_path / "out")]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and message in err, err
        assert not (tmp_path / "out").exists()


def test_first_devices_keeps_their_links():
    c = parse_devices("dgx1-v100")
    sub = first_devices(c, 3)
    assert sub.num_devices == 3 and np.array_equal(sub.bandwidth, c.bandwidth[:3, :3])


def test_explain_takes_one_device_more_and_fewer_from_capacity_json(tmp_path, capsys):
    g = synth_graph(80, seed=2, shape="chain")
    path, out = write_graph(tmp_path, g), tmp_path / "cap"
    one = parse_devices("cpu:1").with_options(memory=2**50)
    memory = str(int(evaluate(g, one, np.zeros(g.num_nodes, np.int32)).peak_memory_bytes[0] * 0.6))
    assert main(["capacity", path, "--devices", "cpu:4", "--memory", memory, "--reserve", "0.1", "-o", str(out)]) == 0
    rows = {r["devices"]: r for r in json.loads((out / "capacity.json").read_text())["rows"]}
    assert rows[3]["fits_at_memory"] and not rows[1]["fits_at_memory"]
    for k in (2, 3):
        assert main(["explain", str(out / f"k{k}"), "--json", str(tmp_path / f"e{k}.json")]) == 0
        what_if = {w["change"]: w for w in json.loads((tmp_path / f"e{k}.json").read_text())["what_if"]}
        for other in (k - 1, k + 1):
            row = next(w for change, w in what_if.items() if change.startswith(f"{other} devices"))
            assert row["how"].startswith("capacity.json")
            assert row["feasible"] == rows[other]["fits_at_memory"]
            assert row["makespan_us"] == (rows[other]["step_us_at_memory"] if row["feasible"] else None)
    capsys.readouterr()


def synth_cases():
    """Synthetic steps of a few hundred nodes on 2 to 4 CPUs, with memory to spare."""
    for seed, shape, k in [(3, "dag", 3), (5, "chain", 2), (8, "dag", 4)]:
        g = synth_graph(150, seed=seed, shape=shape)
        yield g, parse_devices(f"cpu:{k}").with_options(memory=2**40, reserve=0.1)


def test_the_least_memory_is_placed_as_pardnn_place_places_it(monkeypatch):
    """Each row's placement at its least memory is the one `pardnn place --memory`
    gives there, whether it took the candidates a check judged there (a check at the
    near-bound memory or below judges them all) or built them again; both happen."""
    from pardnn.pipeline.place import place
    real, reused = capacity_module.run_placement, []
    monkeypatch.setattr(capacity_module, "run_placement", lambda graph, cluster, algorithm, judged=None, **more: (
        reused.append(judged is not None) or real(graph, cluster, algorithm, judged=judged, **more)))
    for g, cluster in synth_cases():
        row = capacity(g, cluster, [cluster.num_devices])[0]
        placement, report = place(g, cluster.with_options(memory=row.least.memory))
        assert np.array_equal(placement.device, row.least.placement.device)
        assert report.makespan_us == row.least.report.makespan_us
        assert report.peak_memory_bytes == row.least.report.peak_memory_bytes
    assert any(reused) and not all(reused)


def test_choose_takes_the_candidates_judge_all_judged():
    """portfolio.choose given judge_all's Judgements of the same cluster keeps what it
    keeps without them; given another cluster's, it refuses them."""
    from pardnn.pipeline.portfolio import choose, judge_all
    for g, roomy in synth_cases():
        cluster = roomy.with_options(memory=int(max(evaluate(g, roomy, build(g, roomy, "step1")).peak_memory_bytes)))
        judged = judge_all(g, cluster, "pardnn")
        assert list(judged.candidates) == [n for n in registry.candidates("pardnn") if n in judged.candidates]
        again, fresh = choose(g, cluster, "pardnn", judged=judged), choose(g, cluster, "pardnn")
        assert again.winner == fresh.winner and np.array_equal(again.judged.device, fresh.judged.device)
        assert again.judged.schedule.makespan == fresh.judged.schedule.makespan
        assert again.step1_output == fresh.step1_output
        with pytest.raises(ValueError, match="another cluster"):
            choose(g, cluster.with_options(memory=int(cluster.memory.max())), "pardnn", judged=judged)


def test_rows_side_by_side_are_the_rows_one_after_another(monkeypatch):
    """Counts found in lanes (forked processes, pardnn.pipeline.lanes) are those found
    here one after another, in the order asked, whatever order they ran in."""
    from pardnn.pipeline import lanes
    g, cluster = next(synth_cases())
    alone = capacity(g, cluster, [1, 3])
    monkeypatch.setattr(lanes, "PARALLEL_MIN_NODES", 0)
    monkeypatch.setattr(lanes, "_shares", lambda jobs: [[cpu] for cpu in sorted(os.sched_getaffinity(0))[:1]] * 2)
    side = capacity(g, cluster, [1, 3])
    assert [r.fields(1.0) for r in side] == [r.fields(1.0) for r in alone]
    assert all(np.array_equal(a.least.placement.device, b.least.placement.device) for a, b in zip(side, alone))


def test_a_lane_raises_what_its_job_raised(monkeypatch):
    from pardnn.base.errors import UserError
    from pardnn.pipeline import lanes
    monkeypatch.setattr(lanes, "_shares", lambda jobs: [[cpu] for cpu in sorted(os.sched_getaffinity(0))[:1]] * 2)

    def job(x):
        if x == 3:
            raise UserError("--counts: three")
        return x * x
    assert lanes.in_lanes(job, [1, 2, 4, 5], nodes=10**6, first=[3, 2, 1, 0]) == [1, 4, 16, 25]
    with pytest.raises(UserError, match="--counts: three"):
        lanes.in_lanes(job, [1, 2, 3, 4], nodes=10**6)


@pytest.mark.parametrize("threshold", [1.0, 1.003, 1.012, 1.025, 1.05, 1.3, 2.9])
def test_the_search_ends_within_the_tolerance_failing_once_at_the_end(threshold):
    """_bisect on a memory that fits from `threshold` times the bound up: the answer
    fits, lies within TOLERANCE of a memory that did not (or NEAR_BOUND of the bound),
    and once the bracket is within ENDGAME TOLERANCEs at most one memory fails, and
    the bound itself, tried once after a stop within NEAR_BOUND of it."""
    tol, low, top = capacity_module.TOLERANCE, 10**9, 3 * 10**9
    tried, state = [], {"lo": low - 1, "best": top, "late_failures": 0}

    def fits(m):
        tried.append(m)
        ok = m >= threshold * low
        late = state["best"] - state["lo"] < capacity_module.ENDGAME * tol * state["best"]
        state["late_failures"] += late and not ok
        state["best" if ok else "lo"] = m
        return ok
    best = capacity_module._bisect(low, top, fits)
    assert best >= threshold * low and len(set(tried)) == len(tried)
    assert best <= max(capacity_module._near(low), state["lo"] + max(1, int(tol * best)))
    at_bound = tried[-1] == low                               # the try at the bound, last
    assert state["late_failures"] <= 1 + at_bound
    assert best == low if threshold == 1.0 else best > low
    if threshold <= 1 + capacity_module.NEAR_BOUND / 2:      # the first fit at the near-bound memory or below ends it
        assert at_bound and tried[-2] <= capacity_module._near(low) and best in (low, tried[-2])
        assert all(m > capacity_module._near(low) for m in tried[:-2])
    if best > capacity_module._near(low):                     # stopped by the tolerance: the bound is not tried
        assert not at_bound


def test_the_order_of_a_check_changes_its_work_not_its_answer():
    """A Feasibility that has checked larger memories (the last fit first, the least
    over capacity next) answers as a fresh one does at each memory."""
    g, cluster = next(synth_cases())
    peak = max(evaluate(g, cluster, build(g, cluster, "step1")).peak_memory_bytes)
    seen = Feasibility(g, cluster, "pardnn")
    for share in (1.0, 0.8, 0.6, 0.5, 0.45, 0.4, 0.35):
        memory = int(peak * share / 0.9)
        assert seen.fits(memory) == Feasibility(g, cluster, "pardnn").fits(memory), share


def test_memory_blind_placements_are_made_once_per_devices(monkeypatch):
    """portfolio.build makes a placer that reads no memory once per graph and devices
    (whatever their memory), and a memory-aware one every time."""
    made = []
    real = registry.run
    monkeypatch.setattr(registry, "run", lambda name, *a, **k: made.append(name) or real(name, *a, **k))
    g = synth_graph(200, seed=4, shape="dag")
    for memory in (2**40, 2**30, 2**40):
        for name in ("heft", "metis", "etf"):
            build(g, parse_devices("cpu:3").with_options(memory=memory), name)
        build(g, parse_devices("cpu:2").with_options(memory=memory), "heft")
    assert made.count("heft") == 2 and made.count("metis") == 1 and made.count("etf") == 3

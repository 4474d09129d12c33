"""Recomputation on the CostGraph (pardnn.graph.recompute, pardnn.graph.checkpoints) and
as a placement lever (pardnn.pipeline.recompute, run_placement), on hand-made graphs
whose answer is known."""

import numpy as np
import pytest

from pardnn.base.errors import GraphError, UserError
from pardnn.emulator.memory import track_memory
from pardnn.emulator.scheduler import simulate
from pardnn.graph import RESIDUAL, CostGraph, checkpoints
from pardnn.graph.recompute import copy_name, original_name, with_recompute
from pardnn.hardware import parse_devices
from pardnn.pipeline.place import place, run_placement
from pardnn.pipeline.recompute import late_readers, one_device_times, recomputations
from pardnn.repair.least_memory import least_memory

MB = 1000


def chain(layers=3, act=100 * MB, weight=10):
    """A chain of `layers` forward ops (each reads the one before and a weight) and its
    backward pass: g_i reads the incoming gradient and layer i's input, as a MatMul's
    gradient does. Every activation is saved for the backward pass."""
    names, ops, comp, out, kind, edges = [], [], [], [], [], []

    def node(name, op, us, nbytes, k=0):
        names.append(name), ops.append(op), comp.append(us), out.append(nbytes), kind.append(k)

    node("x", "Placeholder", 0, act)
    for i in range(layers):
        node(f"w{i}", "VarHandleOp", 0, weight, RESIDUAL)
        node(f"f{i}", "Mul", 10, act)
        edges += [(f"f{i - 1}" if i else "x", f"f{i}", act), (f"w{i}", f"f{i}", weight)]
    node("loss", "Sum", 1, 4)
    edges.append((f"f{layers - 1}", "loss", act))
    node("gradients/seed", "Fill", 1, act)
    edges.append(("loss", "gradients/seed", 4))
    grad = "gradients/seed"
    for i in reversed(range(layers)):
        node(f"gradients/g{i}", "Mul", 10, act)
        edges += [(grad, f"gradients/g{i}", act), (f"f{i - 1}" if i else "x", f"gradients/g{i}", act)]
        grad = f"gradients/g{i}"
    src, dst, nbytes = zip(*edges)
    return CostGraph.build(names=names, ops=ops, comp_us=comp, out_bytes=out, kind=kind,
                           edge_src=list(src), edge_dst=list(dst), edge_bytes=list(nbytes))


def peak(graph, k=1):
    one = parse_devices(f"cpu:{k}")
    device = np.zeros(graph.num_nodes, np.int32)
    schedule = simulate(graph, one, device)
    return int(track_memory(graph, one, device, schedule).peak_bytes[0]), schedule


def rewrite(graph, names):
    start, finish = one_device_times(graph)
    readers, _ = late_readers(graph, start, finish)
    index = graph.index()
    return with_recompute(graph, [index[n] for n in names], readers, start, finish)


def edges_of(graph):
    return {(graph.names[s], graph.names[d], int(k))
            for s, d, k in zip(graph.edge_src.tolist(), graph.edge_dst.tolist(), graph.edge_slot.tolist())}


def test_names_round_trip():
    assert original_name(copy_name("a/b:0")) == "a/b:0"
    assert original_name("a/b") is None


def test_copies_read_copies_and_checkpoints_and_wait_for_the_gradient():
    graph = chain(3)
    new, done = rewrite(graph, ["f0", "f1"])
    edges = edges_of(new)
    c0, c1 = copy_name("f0"), copy_name("f1")
    assert new.num_nodes == graph.num_nodes + 2
    assert ("x", c0, 0) in edges and ("w0", c0, 0) in edges          # checkpoint and weight: originals
    assert (c0, c1, 0) in edges and ("f0", c1, 0) not in edges        # a recomputed input: its copy
    assert (c1, "gradients/g2", 0) in edges and ("f1", "gradients/g2", 0) not in edges
    assert (c0, "gradients/g1", 0) in edges
    assert ("f1", "f2", 0) in edges                                   # the forward pass is untouched
    # the segment's first reader is g2, which waits for g... nothing backward but the seed
    assert ("gradients/seed", c0, -1) in edges
    assert [new.names[t] for t in done.triggers.tolist()] == ["gradients/seed", "gradients/seed"][:1] + [
        new.names[t] for t in done.triggers.tolist()][1:]
    assert done.triggers.tolist()[1] == -1                           # f1's copy reads f0's: no edge of its own
    assert [new.names[c] for c in done.copies] == [c0, c1]
    assert new.group[done.copies[0]] == new.group[done.originals[0]]


def test_recomputing_lowers_the_peak_by_what_stops_being_kept():
    graph = chain(4)
    before, s0 = peak(graph)
    new, _ = rewrite(graph, ["f0", "f1"])
    after, s1 = peak(new)
    assert s1.makespan == pytest.approx(s0.makespan + 20)            # two ops of 10 us run again
    # before, at g3: x, f0, f1, f2, the seed and g3's output (6 activations); after,
    # at g2: x, the copies of f0 and f1, g3's and g2's outputs (5): f2 is freed by g3
    # before the copies run, and the seed by g3
    assert before == 6 * 100 * MB + 40 and after == 5 * 100 * MB + 40


def test_refuses_state_a_reader_and_a_copy():
    graph = chain(2)
    start, finish = one_device_times(graph)
    readers, _ = late_readers(graph, start, finish)
    index = graph.index()
    with pytest.raises(GraphError, match="'w0'"):
        with_recompute(graph, [index["w0"]], readers, start, finish)
    with pytest.raises(GraphError, match="gradients/g1"):
        with_recompute(graph, [index["gradients/g1"]], readers, start, finish)
    new, _ = with_recompute(graph, [index["f0"]], readers, start, finish)
    s, f = one_device_times(new)
    r, _ = late_readers(new, s, f)
    with pytest.raises(GraphError, match="already a copy"):
        with_recompute(new, [new.index()[copy_name("f0")]], r, s, f)


def test_plan_cuts_the_chain_into_segments():
    graph = chain(8)
    start, finish = one_device_times(graph)
    readers, backward = late_readers(graph, start, finish)
    facts = checkpoints.passes(graph, readers, backward)
    recomputable, saved = facts
    # g_i reads layer i's input, the seed reads the loss: f7 alone is not saved
    assert sorted(graph.names[i] for i in np.flatnonzero(saved)) == sorted(
        ["x", "loss"] + [f"f{i}" for i in range(7)])
    assert not recomputable[graph.index()["x"]]                      # a source stays
    two = checkpoints.plan(graph, 2, facts)
    # one cut in the middle of the saved bytes, after f3 (every position is as narrow):
    # f3 is kept, the rest recomputed, f7 with the loss that reads it
    assert sorted(graph.names[i] for i in two.ops) == ["f0", "f1", "f2", "f4", "f5", "f6", "f7", "loss"]
    assert sorted(graph.names[i] for i in two.checkpoints) == ["f3", "x"]
    assert two.kept_bytes == 2 * 100 * MB and two.saved_bytes == 8 * 100 * MB + 4
    assert two.recompute_us == 71
    assert two.estimate == two.kept_bytes + 3 * 100 * MB + 4         # the larger segment's saved bytes


def test_no_plan_without_a_backward_pass():
    graph = CostGraph.build(names=["a", "b"], ops=["Placeholder", "Mul"], comp_us=[1, 1],
                            out_bytes=[8, 8], edge_src=["a"], edge_dst=["b"], edge_bytes=[8])
    assert list(recomputations(graph)) == []


def test_run_placement_recomputes_only_when_memory_binds():
    graph = chain(6)
    roomy = parse_devices("cpu:1").with_options(memory=10**9, reserve=0.0)
    placed = run_placement(graph, roomy)
    assert placed.recomputation is None and placed.graph is graph
    need, _ = peak(graph)
    tight = parse_devices("cpu:1").with_options(memory=need - 150 * MB, reserve=0.0)
    with pytest.raises(UserError, match="^memory:"):
        run_placement(graph, tight, recompute="off")
    placed = run_placement(graph, tight)
    assert placed.recomputation is not None
    assert placed.graph.num_nodes > graph.num_nodes
    assert int(placed.placement.profile.peak_bytes.max()) <= need - 150 * MB
    _, report = place(graph, tight)
    doc = report.to_json()["recompute"]
    assert doc["ops"] == len(placed.recomputation.plan.ops)
    assert doc["kept_bytes"] < doc["kept_before_bytes"]
    assert doc["least_memory_recomputing"] <= doc["least_memory_keeping"]


def test_random_ops_are_kept_and_their_draws_read_by_the_copies():
    """Dropout's mask: the random op is never recomputed; the copy of the op that
    applies the mask reads the draw the forward pass made, so both runs agree."""
    names = ["x", "noise", "mask", "drop", "f", "loss", "gradients/seed", "gradients/g_f", "gradients/g_drop"]
    ops = ["Placeholder", "RandomUniform", "GreaterEqual", "Mul", "Mul", "Sum", "Fill", "Mul", "Mul"]
    edges = [("x", "drop"), ("noise", "mask"), ("mask", "drop"), ("drop", "f"), ("f", "loss"),
             ("loss", "gradients/seed"), ("gradients/seed", "gradients/g_f"), ("drop", "gradients/g_f"),
             ("gradients/g_f", "gradients/g_drop"), ("mask", "gradients/g_drop")]
    graph = CostGraph.build(names=names, ops=ops, comp_us=[1] * 9, out_bytes=[100] * 9,
                            edge_src=[a for a, _ in edges], edge_dst=[b for _, b in edges], edge_bytes=[100] * 10)
    start, finish = one_device_times(graph)
    readers, backward = late_readers(graph, start, finish)
    recomputable, _ = checkpoints.passes(graph, readers, backward)
    assert not recomputable[graph.index()["noise"]]
    new, done = with_recompute(graph, [graph.index()[n] for n in ("mask", "drop")], readers, start, finish)
    edges = edges_of(new)
    assert ("noise", copy_name("mask"), 0) in edges and copy_name("noise") not in new.index()
    for lever in recomputations(graph):
        assert "noise" not in {graph.names[i] for i in lever.plan.ops}


def test_recompute_on_refuses_a_graph_without_a_backward_pass():
    graph = CostGraph.build(names=["a", "b"], ops=["Placeholder", "Mul"], comp_us=[1, 1],
                            out_bytes=[8, 8], edge_src=["a"], edge_dst=["b"], edge_bytes=[8])
    with pytest.raises(UserError, match="^--recompute on: no op"):
        run_placement(graph, parse_devices("cpu:1"), recompute="on")


def test_place_emulate_and_explain_a_recomputing_placement(tmp_path, capsys):
    """`pardnn place --recompute on` writes the copies into placement.csv; `emulate` and
    `explain` rebuild the same graph from those names and agree with report.json."""
    import json

    from pardnn.cli import main
    path = tmp_path / "chain.json"
    chain(6).to_json(str(path))
    out = tmp_path / "placed"
    assert main(["place", str(path), "--devices", "cpu:2", "--recompute", "on", "-o", str(out)]) == 0
    assert "recompute:" in capsys.readouterr().out
    report = json.loads((out / "report.json").read_text())
    assert report["recompute"]["ops"] > 0
    assert "\npardnn_recompute/" in (out / "placement.csv").read_text()
    assert main(["emulate", str(path), "--placement", str(out / "placement.csv"), "--devices", "cpu:2",
                 "--report", str(tmp_path / "again.json")]) == 0
    again = json.loads((tmp_path / "again.json").read_text())
    assert again["makespan_us"] == report["makespan_us"]
    assert again["peak_memory_bytes"] == report["peak_memory_bytes"]
    assert main(["explain", str(out)]) == 0
    assert "recompute:" in capsys.readouterr().out
    assert main(["place", str(path), "--devices", "cpu:2", "--recompute", "off", "-o", str(tmp_path / "plain")]) == 0
    assert "recompute" not in json.loads((tmp_path / "plain" / "report.json").read_text())


def test_a_segment_nothing_in_the_backward_pass_waits_for_is_not_recomputed():
    """The loss's only backward reader is the gradient's seed, which waits for no other
    backward op: its copy would run at forward time and save nothing, so it is dropped
    and the rest stays."""
    graph = chain(3)
    new, done = rewrite(graph, ["loss"])
    assert new is graph and len(done) == 0
    new, done = rewrite(graph, ["f0", "f1", "loss"])
    assert sorted(new.names[c] for c in done.copies) == [copy_name("f0"), copy_name("f1")]
    for lever in recomputations(chain(8)):
        assert "loss" not in {lever.source.names[i] for i in lever.plan.ops}
        assert len(lever.plan.ops) == len(lever.done)


def test_when_recomputing_fails_too_the_reason_names_the_bound_that_holds_with_it():
    """Below the bound that keeps every activation ("live at once"), a placement that
    recomputes may still fit, so once recomputation was tried the reason nothing fits
    names the bounds that hold whatever is recomputed: "pardnn found none" above them,
    "no placement fits" below them; with recomputation off, the old proof stands."""
    graph = chain(6)
    need = least_memory(graph, 1)
    keeping, recomputing = need.bytes, need.recomputing().bytes
    assert recomputing < keeping
    at = parse_devices("cpu:1").with_options(memory=recomputing, reserve=0.0)
    with pytest.raises(UserError, match="recomputing activations or not") as found:
        run_placement(graph, at)
    assert "live at once" not in str(found.value) and "whatever is recomputed" in str(found.value)
    below = parse_devices("cpu:1").with_options(memory=recomputing - 1, reserve=0.0)
    with pytest.raises(UserError, match="^memory: no placement fits, whatever is recomputed"):
        run_placement(graph, below)
    with pytest.raises(UserError, match="live at once"):
        run_placement(graph, below, recompute="off")


def with_ops(graph, ops):
    """`graph` with the op types of `ops` ({name: op}) changed."""
    return CostGraph.build(names=list(graph.names), ops=[ops.get(n, op) for n, op in zip(graph.names, graph.ops)],
                           comp_us=graph.comp_us, out_bytes=graph.out_bytes, kind=graph.kind,
                           edge_src=graph.edge_src, edge_dst=graph.edge_dst, edge_bytes=graph.edge_bytes)


def test_kept_at_once_counts_only_what_no_recomputation_makes_again():
    """At the first gradient's start: the feed x (a source, read by g0), the seed (a
    backward op) and the gradient's own output; the activations f0, f1, which a copy
    can make again, do not count. A random op's output (a dropout mask) does."""
    from pardnn.repair.live_at_once import kept_at_once
    graph = chain(3)
    op, kept = kept_at_once(graph)
    assert graph.names[op] == "gradients/g2" and kept == 3 * 100 * MB
    op, kept = kept_at_once(with_ops(graph, {"f1": "RandomUniform"}))
    assert kept == 4 * 100 * MB                 # f1, read by g2, is a draw: kept
    bounds = least_memory(graph, 2).recomputing().fields()["bounds"]     # over 2 devices, with the weights
    assert bounds["kept at once"] == (3 * 100 * MB + 30) // 2 and "live at once" not in bounds


@pytest.mark.parametrize("k", [1, 2])
def test_no_recomputation_goes_below_the_kept_at_once_bound(k):
    """Every lever's graph, on every placement of its colocation groups (2 devices:
    random ones), peaks at least at the bound that holds whatever is recomputed."""
    graph = chain(6)
    need = least_memory(graph, k).recomputing()
    kept = [b for b in need.bounds if b.name == "kept at once"][0].bytes
    rng = np.random.default_rng(0)
    cluster = parse_devices(f"cpu:{k}")
    for lever in recomputations(graph):
        g = lever.graph
        for _ in range(20 if k > 1 else 1):
            device = rng.integers(0, k, g.num_groups)[g.group].astype(np.int32)
            schedule = simulate(g, cluster, device)
            peaks = track_memory(g, cluster, device, schedule).peak_bytes
            assert peaks.sum() >= kept and peaks.max() >= need.bytes

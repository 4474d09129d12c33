"""pardnn explain on small hand-made graphs whose answers are known, and the command
on place outputs of cost-graph JSON files (no TensorFlow): layers, the critical path's
shares, device time, memory at the peaks, the what-ifs as real re-emulations, and bad
input as one line with exit code 2."""

import json
from dataclasses import replace

import numpy as np
import pytest

from pardnn.cli import main
from pardnn.emulator.memory import track_memory
from pardnn.emulator.scheduler import simulate
from pardnn.explain import explain, what_if
from pardnn.explain.layers import TOP_LEVEL, find_layers
from pardnn.explain.memory_at_peak import CATEGORIES
from pardnn.explain.placed import Emulated
from pardnn.graph import CostGraph, NORMAL, REFERENCE, RESIDUAL
from pardnn.hardware import parse_devices
from pardnn.hardware.cluster import Cluster, Device
from pardnn.pipeline.place import place
from pardnn.pipeline.report import evaluate


def placed_of(graph, cluster, device, report=None, profile_json=None):
    """An Emulated of `device`, run through the emulator here, with report.json's emulation fields."""
    device = np.asarray(device, np.int64)
    schedule = simulate(graph, cluster, device)
    memory = track_memory(graph, cluster, device, schedule)
    report = {**evaluate(graph, cluster, device).to_json(), "algorithm": "test", **(report or {})}
    return Emulated(graph, cluster, device, schedule, memory, report, {}, profile_json)


def layer_of(layers, graph):
    return {name: layers.names[layers.of[i]] for i, name in enumerate(graph.names)}


def chain_graph(names, comp, out=None, **kwargs):
    n = len(names)
    return CostGraph.build(names=names, comp_us=comp, out_bytes=out or [0] * n,
                           edge_src=names[:-1], edge_dst=names[1:], **kwargs)


# ------------------------------------------------------------------------ layers
def test_tf1_gradient_and_update_ops_join_their_layer():
    names = ["x", "layer0/w", "layer0/w/Read", "layer0/MatMul", "layer1/MatMul", "loss",
             "gradients/layer1/MatMul_grad/MatMul", "gradients/layer0/MatMul_grad/MatMul",
             "train/update_layer0/w/ResourceApplyAdam", "train/learning_rate"]
    g = CostGraph.build(names=names, ops=["Placeholder", "VarHandleOp", "ReadVariableOp", "MatMul", "MatMul",
                                          "Mean", "MatMul", "MatMul", "ResourceApplyAdam", "Const"],
                        kind=[NORMAL, RESIDUAL, REFERENCE] + [NORMAL] * 5 + [REFERENCE, NORMAL],
                        edge_src=[0, 1, 2, 3, 4, 5, 6, 7, 1, 9], edge_dst=[3, 2, 3, 4, 5, 6, 7, 8, 8, 8],
                        edge_slot=[0] * 10)
    layers = find_layers(g)
    assert layers.by == "name scope"
    assert layer_of(layers, g) == {
        "x": TOP_LEVEL, "layer0/w": "layer0", "layer0/w/Read": "layer0", "layer0/MatMul": "layer0",
        "layer1/MatMul": "layer1", "loss": TOP_LEVEL, "gradients/layer1/MatMul_grad/MatMul": "layer1",
        "gradients/layer0/MatMul_grad/MatMul": "layer0", "train/update_layer0/w/ResourceApplyAdam": "layer0",
        "train/learning_rate": "train"}
    assert sorted(np.bincount(layers.of)) == sorted(np.bincount(layers.of)[np.bincount(layers.of) > 0])


def keras_like_graph():
    """Two Keras dense layers traced in a tf.function, and an `adam/` scope that writes
    their kernels: each update's arithmetic feeds one kernel's write; the learning rate
    feeds both."""
    names = ["seq_1/dense_1/ReadVariableOp/resource", "seq_1/dense_1/MatMul",
             "seq_1/dense_1_2/ReadVariableOp/resource", "seq_1/dense_1_2/MatMul", "Identity",
             "gradient_tape/seq_1/dense_1_2/MatMul/MatMul", "adam/lr", "adam/Mul", "adam/AssignSubVariableOp",
             "adam/Mul_1", "adam/AssignSubVariableOp_1"]
    ops = ["VarHandleOp", "MatMul", "VarHandleOp", "MatMul", "Identity", "MatMul", "Const", "Mul",
           "AssignSubVariableOp", "Mul", "AssignSubVariableOp"]
    edges = [(0, 1), (1, 3), (2, 3), (3, 4), (4, 5), (5, 7), (6, 7), (7, 8), (2, 8), (5, 9), (6, 9), (9, 10), (0, 10)]
    return CostGraph.build(names=names, ops=ops, kind=[RESIDUAL, 0, RESIDUAL, 0, 0, 0, 0, 0, REFERENCE, 0, REFERENCE],
                           edge_src=[a for a, _ in edges], edge_dst=[b for _, b in edges], edge_slot=[0] * len(edges),
                           group=[0, 1, 2, 3, 4, 5, 6, 7, 2, 9, 0])


def test_optimizer_scope_ops_take_the_layer_of_the_variable_they_update():
    g = keras_like_graph()
    got = layer_of(find_layers(g), g)
    assert got["adam/AssignSubVariableOp"] == got["adam/Mul"] == "seq_1/dense_1_2"     # colocated, then consumer
    assert got["adam/AssignSubVariableOp_1"] == got["adam/Mul_1"] == "seq_1/dense_1"
    assert got["adam/lr"] == "adam"                         # feeds both layers: stays in its own group
    assert got["gradient_tape/seq_1/dense_1_2/MatMul/MatMul"] == "seq_1/dense_1_2"


def test_keras_scopes_take_the_layer_paths_profile_json_ties_them_to():
    g = keras_like_graph()
    profile = {"variables": {"seq_1/dense_1/ReadVariableOp/resource": "seq/dense/kernel:0",
                             "seq_1/dense_1_2/ReadVariableOp/resource": "seq/dense_1/kernel:0"}}
    layers = find_layers(g, profile)
    got = layer_of(layers, g)
    assert layers.by == "Keras layer path"
    assert got["seq_1/dense_1/MatMul"] == got["adam/Mul_1"] == "seq/dense"
    assert got["seq_1/dense_1_2/MatMul"] == got["adam/Mul"] == "seq/dense_1"


def test_a_scope_holding_most_nodes_is_split_and_depth_overrides():
    names = ["model/a/x", "model/a/y", "model/b/x", "model/b/y", "model/z", "other/x"]
    g = CostGraph.build(names=names)
    assert layer_of(find_layers(g), g) == {"model/a/x": "model/a", "model/a/y": "model/a", "model/b/x": "model/b",
                                           "model/b/y": "model/b", "model/z": "model", "other/x": "other"}
    assert set(find_layers(g, depth=1).names) == {"model", "other"}


def test_every_node_falls_in_exactly_one_layer():
    g = keras_like_graph()
    layers = find_layers(g)
    assert layers.of.shape == (g.num_nodes,) and layers.of.min() >= 0
    assert np.all(np.bincount(layers.of, minlength=len(layers.names)) > 0)    # no empty layer
    assert len(set(layers.names)) == len(layers.names)


# -------------------------------------------------------------------------- step
def two_devices(latency=5.0, bandwidth=100.0):
    return parse_devices("cpu:2").with_options(latency=latency, bandwidth=bandwidth)


def test_a_transfer_on_the_path_counts_for_the_layer_it_feeds():
    g = chain_graph(["L1/a", "L2/b"], [10, 10], [1000, 8], edge_bytes=[1000])
    placed = placed_of(g, two_devices(), [0, 1])        # a 0-10, transfer 10-25 (5 + 1000/100), b 25-35
    e = explain(placed, place_again=False)
    step = e["step"]
    assert step["makespan_us"] == 35
    assert step["path"] == {"compute_us": 20, "transfer_us": 15, "device_wait_us": 0, "ops": 2, "transfers": 1}
    assert [(r["layer"], r["compute_us"], r["transfer_us"]) for r in step["path_by_layer"]] == [
        ("L2", 10, 15), ("L1", 10, 0)]
    assert step["transfers"][0] | {"tensor": "L1/a:0", "bytes": 1000, "from_layer": "L1", "to_layer": "L2",
                                   "cost_us": 15.0} == step["transfers"][0]
    dev0, dev1 = step["devices"]
    assert (dev0["busy_us"], dev0["idle_inputs_us"], dev0["idle_nothing_us"]) == (10, 0, 25)
    assert (dev1["busy_us"], dev1["idle_inputs_us"], dev1["idle_nothing_us"]) == (10, 15, 10)


def test_an_op_that_kept_the_device_busy_counts_as_waiting():
    g = CostGraph.build(names=["A/a", "B/b", "C/c"], comp_us=[10, 10, 30], out_bytes=[8, 8, 8],
                        edge_src=["A/a"], edge_dst=["B/b"], edge_bytes=[1000])
    placed = placed_of(g, two_devices(), [0, 1, 1])     # c 0-30 on dev1; b ready at 25, runs 30-40
    path = explain(placed, place_again=False)["step"]["path_by_layer"]
    assert [(r["layer"], r["compute_us"], r["device_wait_us"]) for r in path] == [("C", 0, 30), ("B", 10, 0)]


def test_the_binding_bound_and_gap():
    g = chain_graph(["a", "b"], [10, 30])
    step = explain(placed_of(g, two_devices(), [0, 0]), place_again=False)["step"]
    assert step["binding"] == "critical path" and step["lower_bound_us"] == 40 and step["gap"] == 1.0
    assert step["lower_bound_us"] == placed_of(g, two_devices(), [0, 0]).report["lower_bound_us"]


# ------------------------------------------------------------------------ memory
def training_graph():
    """A weight w (100 B) with an Adam slot (200 B) colocated with its update; a
    forward op (1,000 B out), the loss (4 B), a gradient (1,000 B out, 50 B scratch)."""
    names = ["L/w", "L/w/Adam", "L/MatMul", "loss", "gradients/L/MatMul_grad/MatMul",
             "train/update_L/w/ResourceApplyAdam"]
    edges = [(0, 2), (2, 3), (2, 4), (3, 4), (4, 5), (0, 5), (1, 5)]
    return CostGraph.build(names=names, ops=["VarHandleOp", "VarHandleOp", "MatMul", "Mean", "MatMul",
                                             "ResourceApplyAdam"],
                           comp_us=[0, 0, 10, 1, 10, 1], out_bytes=[100, 200, 1000, 4, 1000, 0],
                           temp_bytes=[0, 0, 0, 0, 50, 0], kind=[RESIDUAL, RESIDUAL, 0, 0, 0, REFERENCE],
                           edge_src=[a for a, _ in edges], edge_dst=[b for _, b in edges],
                           edge_bytes=[100, 1000, 1000, 4, 1000, 100, 200], edge_slot=[0] * 7,
                           group=[0, 0, 1, 2, 3, 0])


def test_memory_at_the_peak_by_category_adds_up_to_the_peak():
    g = training_graph()
    placed = placed_of(g, parse_devices("cpu:2"), [0] * 6, profile_json={"loss": "loss:0"})
    e = explain(placed, place_again=False, depth=1)
    peak = e["memory"][0]
    assert peak["peak_bytes"] == placed.report["peak_memory_bytes"][0] == 2354 and peak["peak_time_us"] == 11
    assert peak["categories"] == {"variables": 100, "optimizer_state": 200, "activations": 1004,
                                  "gradients": 1000, "other_tensors": 0, "scratch": 50}
    # w is colocated with its bigger slot: only the slot moves; the update holds nothing
    assert peak["movable"] == {"variables": 0, "optimizer_state": 200, "activations": 1004,
                               "gradients": 1000, "other_tensors": 0, "scratch": 50}
    assert [(r["layer"], r["total"]) for r in peak["layers"]] == [("L", 2350), (TOP_LEVEL, 4)]
    assert e["memory"][1]["peak_bytes"] == 0 and sum(e["memory"][1]["categories"].values()) == 0


def test_a_pinned_group_is_not_movable():
    g = replace(training_graph(), pinned=("", "", "", "", "GPU", ""))
    devices = (Device("/job:localhost/replica:0/task:0/device:CPU:0", "CPU", 2**20),
               Device("/job:localhost/replica:0/task:0/device:GPU:0", "GPU", 2**20))
    cluster = Cluster(devices, np.array([[0, 5.0], [5.0, 0]]), np.array([[np.inf, 100.0], [100.0, np.inf]]))
    placed = placed_of(g, cluster, [1] * 6, profile_json={"loss": "loss"})
    peak = explain(placed, place_again=False)["memory"][1]
    assert peak["categories"]["gradients"] == 1000 and peak["movable"]["gradients"] == 0
    assert peak["movable"]["scratch"] == 0 and peak["movable"]["activations"] == 1004


def test_without_a_loss_resident_state_is_variables_and_buffers_activations():
    g = training_graph()
    peak = explain(placed_of(g, parse_devices("cpu:2"), [0] * 6), place_again=False)["memory"][0]
    assert peak["categories"] == {"variables": 300, "optimizer_state": 0, "activations": 2004,
                                  "gradients": 0, "other_tensors": 0, "scratch": 50}


# ----------------------------------------------------------------------- what-ifs
def two_chains():
    """Two independent chains of 3 ops (layers A and B), 10 us each."""
    names = [f"{layer}/op{i}" for layer in "AB" for i in range(3)]
    return CostGraph.build(names=names, comp_us=[10] * 6, out_bytes=[8] * 6,
                           edge_src=[0, 1, 3, 4], edge_dst=[1, 2, 4, 5], edge_bytes=[8] * 4)


def test_what_ifs_are_re_emulations():
    g, cluster = two_chains(), two_devices()
    placed = placed_of(g, cluster, [0] * 6, report={"algorithm": "round-robin"})
    rows = {row["change"]: row for row in explain(placed, place_again=True)["what_if"]}
    wider = replace(cluster, bandwidth=cluster.bandwidth * 2)
    assert rows["2x link bandwidth"]["makespan_us"] == evaluate(g, wider, placed.device).makespan_us
    move = rows["move A to CPU:1"]                      # A and B tie: the first wins
    trial = placed.device.copy()
    trial[:3] = 1
    assert move["makespan_us"] == simulate(g, cluster, trial).makespan == 30 and move["delta_us"] == -30
    for k, key in ((1, "1 devices (one fewer)"), (3, "3 devices (one more)")):
        _, report = place(g, what_if.resized(cluster, k), "round-robin")
        assert rows[key]["makespan_us"] == report.makespan_us
    assert rows["best other candidate"]["makespan_us"] is None       # a plain algorithm has none


def test_resized_clusters_drop_or_copy_the_last_device():
    cluster = parse_devices("dgx-h100").with_options(latency=3.0)
    fewer, more = what_if.resized(cluster, 7), what_if.resized(cluster, 9)
    assert fewer.names == cluster.names[:7]
    assert more.names[-1] == "/job:localhost/replica:0/task:0/device:GPU:8" and more.num_devices == 9
    assert more.devices[-1].memory == cluster.devices[-1].memory
    assert np.all(more.latency_us[8, :8] == 3.0) and more.bandwidth[8, 8] == np.inf
    assert np.array_equal(more.bandwidth[:7, 8], cluster.bandwidth[:7, 7]) and more.bandwidth[7, 8] == cluster.bandwidth[7, 6]


def test_the_best_other_candidate_is_the_fastest_feasible_one_not_kept():
    g = two_chains()
    candidates = {"heft": {"feasible": True, "makespan_us": 40.0, "refined_makespan_us": 35.0},
                  "etf": {"feasible": True, "makespan_us": 38.0}, "metis": {"feasible": False, "makespan_us": None},
                  "stages": {"feasible": True, "makespan_us": 30.0}}
    placed = placed_of(g, two_devices(), [0] * 6, report={"candidate": "stages", "candidates": candidates})
    row = what_if.other_candidate(placed, False)
    assert row["change"] == "candidate heft" and row["makespan_us"] == 35.0


# --------------------------------------------------------------- the command, no TF
@pytest.fixture
def placed_dir(tmp_path):
    g = training_graph()
    g.to_json(tmp_path / "g.json")
    assert main(["place", str(tmp_path / "g.json"), "--devices", "cpu:2", "--algorithm", "round-robin",
                 "-o", str(tmp_path / "placed")]) == 0
    return tmp_path


def test_explain_matches_report_json(placed_dir, capsys):
    out = placed_dir / "placed"
    assert main(["explain", str(out), "--json", str(placed_dir / "e.json"), "--html", str(placed_dir / "e.html")]) == 0
    assert "The step" in capsys.readouterr().out
    e = json.loads((placed_dir / "e.json").read_text())
    report = json.loads((out / "report.json").read_text())
    step = e["step"]
    assert step["makespan_us"] == report["makespan_us"] and step["lower_bound_us"] == report["lower_bound_us"]
    assert sum(r["total_us"] for r in step["path_by_layer"]) == pytest.approx(report["makespan_us"])
    assert sum(step["path"][k] for k in ("compute_us", "transfer_us", "device_wait_us")) == pytest.approx(
        report["makespan_us"])
    table = e["layers"]["table"]
    assert np.sum([r["nodes"] for r in table], axis=0).tolist() == report["nodes_per_device"]
    assert np.sum([r["busy_us"] for r in table], axis=0) == pytest.approx(report["busy_us"])
    for d, peak in enumerate(e["memory"]):
        assert peak["peak_bytes"] == sum(peak["categories"].values()) == report["peak_memory_bytes"][d]
        assert sum(r["total"] for r in peak["layers"]) == peak["peak_bytes"]
        assert all(sum(r[c] for c in CATEGORIES) == r["total"] for r in peak["layers"])
    for row in step["devices"]:
        assert row["busy_us"] + row["idle_inputs_us"] + row["idle_nothing_us"] == pytest.approx(report["makespan_us"])
    page = (placed_dir / "e.html").read_text()
    assert page.count("data:image/png;base64,") == 2 and "http" not in page.replace("<!DOCTYPE html>", "")


def test_place_explain_prints_the_same_summary(placed_dir, capsys):
    assert main(["place", str(placed_dir / "g.json"), "--devices", "cpu:2", "--algorithm", "round-robin",
                 "--explain", "-o", str(placed_dir / "again")]) == 0
    printed = capsys.readouterr().out
    assert main(["explain", str(placed_dir / "again")]) == 0
    assert capsys.readouterr().out in printed


@pytest.mark.parametrize("how, message", [
    ("missing", "is not a directory"),
    ("not_place", "is not a `pardnn place` output folder"),
    ("no_inputs", "has no inputs.json"),
    ("profile_gone", "which is gone; give where it is now with --profile"),
    ("profile_changed", "changed since it was placed"),
    ("top", "--top: must be at least 1"),
])
def test_bad_input_is_one_line_and_exit_2(placed_dir, capsys, how, message):
    out, argv = placed_dir / "placed", []
    if how == "missing":
        out = placed_dir / "nowhere"
    elif how == "not_place":
        out = placed_dir
    elif how == "no_inputs":
        (out / "inputs.json").unlink()
    elif how == "profile_gone":
        (placed_dir / "g.json").unlink()
    elif how == "profile_changed":
        g = training_graph()
        replace(g, comp_us=g.comp_us * 2).to_json(placed_dir / "g.json")
    else:
        argv = ["--top", "0"]
    assert main(["explain", str(out), *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_a_moved_profile_is_found_with_profile(placed_dir, capsys):
    (placed_dir / "g.json").rename(placed_dir / "moved.json")
    assert main(["explain", str(placed_dir / "placed"), "--profile", str(placed_dir / "moved.json")]) == 0
    assert main(["explain", str(placed_dir / "placed"), "--profile", str(placed_dir / "nowhere.json")]) == 2
    assert "--profile: " in capsys.readouterr().err


def test_on_one_device_only_the_what_ifs_that_apply(tmp_path):
    g = two_chains()
    rows = explain(placed_of(g, parse_devices("cpu:1"), [0] * 6), place_again=True)["what_if"]
    assert [row["change"] for row in rows] == ["2 devices (one more)", "best other candidate"]
    assert rows[0]["makespan_us"] is None and "no link to copy" in rows[0]["how"]


def test_placing_again_is_skipped_on_request():
    rows = explain(placed_of(two_chains(), two_devices(), [0] * 6), place_again=False)["what_if"]
    assert rows[0]["makespan_us"] is None and rows[0]["how"].startswith("not computed")


def test_the_weights_fetched_from_the_host_largest_first_in_the_order_they_cross():
    """explain's host-fetch lines: the count and bytes, then the `top` largest weights
    (report.json's `host_fetch.fetches`), listed in the order of their forward fetch."""
    from pardnn.explain.terminal import _fetches
    fetch = {"reads": 3, "control_edges": 4, "bytes": 7 << 20, "fetches": [
        {"weight": "a/read", "bytes": 1 << 20, "forward_us": 10.0, "backward_us": 90.0},
        {"weight": "b/read", "bytes": 4 << 20, "forward_us": 30.0, "backward_us": 70.0},
        {"weight": "c/read", "bytes": 2 << 20, "forward_us": 20.0, "backward_us": 80.0}]}
    line, table = list(_fetches(fetch, top=2))
    assert line.startswith("  host fetch: 3 weights (7.00 MiB) read again") and "4 control edges" in line
    assert table.columns[0]._cells == ["c/read", "b/read"]          # the two largest, c fetched first
    assert table.columns[2]._cells == ["20.0 us", "30.0 us"] and table.columns[3]._cells == ["80.0 us", "70.0 us"]

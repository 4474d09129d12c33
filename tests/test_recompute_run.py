"""Recomputation carried into a real TF1 run (issue 51): an mlp placed round-robin on 2
CPU devices, with the planner's first recomputation (pardnn.pipeline.recompute) written
into placed_graph.pb (pardnn.tf.placed_graph, pardnn.tf.recompute), trains as the
placed graph without it under pardnn's session config and TF's default one (Grappler
on): nothing moved, the same losses, the copies ran and were not merged back into their
originals, and TF's allocator holds less on each device. A dropout model's random ops
are never recomputed, and asking for one is a one-line error."""

import os

import numpy as np
import pytest

import pardnn.tf.quiet_import  # noqa: F401  (quiet TensorFlow import first)

from pardnn.base.errors import UserError
from pardnn.cli import main
from pardnn.graph.recompute import original_name, with_recompute
from pardnn.hardware import parse_devices
from pardnn.io.placement import Placement
from pardnn.pipeline.load import load_cost_graph
from pardnn.pipeline.recompute import late_readers, one_device_times, recomputations
from pardnn.tf.graphdef import read_graph_def
from pardnn.tf.placed_graph import write_placed_graph
from pardnn.tf.recompute import MARK, recomputable
from tools.bench_recompute_run import emulated_peaks, measured, place, profile, unplaced_loss, write_recomputed

pytestmark = [pytest.mark.tf, pytest.mark.slow]
KNOBS = ["layers=6", "hidden=256", "batch=64"]


@pytest.fixture(scope="module")
def prof(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("recompute_run"))
    return root, profile(root, "mlp", "small", KNOBS)


def placed_twice(root, prof, k):
    """The profile placed on cpu:k, as placed and with the planner's first recomputation."""
    placed, graph, cluster, device = place(prof, root, k)
    new, new_device, copies = write_recomputed(prof, placed, graph, cluster, device, placed + "_rc")
    return {"placed": placed, "rc": placed + "_rc", "copies": copies, "graph": graph, "new": new,
            "cluster": cluster, "device": device, "new_device": new_device}


@pytest.fixture(scope="module")
def mlp(prof):
    return placed_twice(*prof, 2)


@pytest.fixture(scope="module")
def one(prof):
    return placed_twice(*prof, 1)


@pytest.mark.parametrize("config", ["pardnn", "default"])
def test_a_recomputed_graph_trains_as_placed_and_its_copies_run(mlp, config):
    plain = measured(mlp["placed"], config)
    rc = measured(mlp["rc"], config, mlp["copies"])
    assert rc["moved"] == [] and plain["moved"] == []
    assert rc["loss"] == pytest.approx(plain["loss"], rel=1e-6)
    assert rc["loss"] == pytest.approx(unplaced_loss(mlp["placed"]), rel=1e-6)
    copies = mlp["copies"]
    assert len(copies) >= 6             # two layers or more, their MatMul, BiasAdd and relu
    if config == "pardnn":
        assert rc["copies_ran"] == sorted(copies)
        return
    # Grappler folds shape arithmetic and fuses MatMul+BiasAdd+Relu: a copy may vanish only
    # where its original vanished too, or where it folded to a constant (int32 shape math)
    nodes = {n.name: n for n in read_graph_def(os.path.join(mlp["rc"], "placed_graph.pb")).node}
    merged = [c for c in copies if c not in rc["ran"] and original_name(c) in rc["ran"]
              and nodes[c].attr["T"].type == 1]                     # DT_FLOAT
    assert merged == [] and len(rc["copies_ran"]) >= len(copies) // 4


def test_the_copies_are_marked_and_read_by_the_backward_pass(mlp):
    nodes = {n.name: n for n in read_graph_def(os.path.join(mlp["rc"], "placed_graph.pb")).node}
    for copy in mlp["copies"]:
        assert nodes[copy].attr[MARK].s.decode() == original_name(copy)
        assert nodes[copy].device == nodes[original_name(copy)].device
    readers = [n for n in nodes.values() if any(i.split(":")[0] in mlp["copies"] for i in n.input)
               and not n.name.startswith("pardnn_recompute/")]
    assert readers and all(n.name.startswith("gradients/") for n in readers)


def test_recomputation_lowers_the_allocators_peak(one):
    """On one device: with two, the order in which TF's executor runs ready ops (and so
    the peaks) changes from run to run even with every op in the calling thread."""
    mlp = one
    plain, rc = measured(mlp["placed"], "pardnn"), measured(mlp["rc"], "pardnn", mlp["copies"])
    emulated = (emulated_peaks(mlp["graph"], mlp["cluster"], mlp["device"]),
                emulated_peaks(mlp["new"], mlp["cluster"], mlp["new_device"]))
    print(f"measured peak per device: {plain['peaks']} -> {rc['peaks']}; "
          f"emulated: {emulated[0]} -> {emulated[1]}")
    assert rc["loss"] == plain["loss"] and rc["copies_ran"] == sorted(mlp["copies"])
    assert rc["peaks"][0] < 0.9 * plain["peaks"][0]
    assert emulated[1][0] < emulated[0][0]


def test_a_dropout_models_random_ops_are_never_recomputed(tmp_path):
    prof = str(tmp_path / "prof")            # transformer: dropout after every sublayer
    assert main(["profile", "transformer", "--size", "tiny", "--steps", "1", "-o", prof]) == 0
    graph, _ = load_cost_graph(prof)
    allowed = recomputable(prof)
    random = [i for i, op in enumerate(graph.ops) if op.startswith("Random")]
    assert any(graph.names[i].startswith("dropout") for i in random)
    assert not {graph.names[i] for i in random} & allowed
    for rec in recomputations(graph):
        assert {graph.names[i] for i in rec.plan.ops} <= allowed
    dropout = next(i for i in random if graph.names[i].startswith("dropout"))
    start, finish = one_device_times(graph)
    readers, _ = late_readers(graph, start, finish)
    # with the ops that read the draw (the mask the backward pass reads), so that its
    # segment has a reader to wait for and is kept
    after = [int(d) for d in graph.successors(dropout) if not readers[d]]
    new, done = with_recompute(graph, [dropout] + after, readers, start, finish)
    assert graph.names[dropout] in {new.names[o] for o in done.originals}
    cluster = parse_devices("cpu:1")
    with pytest.raises(UserError, match=f"cannot recompute op '{graph.names[dropout]}': RandomUniform is stateful"):
        write_placed_graph(prof, new, Placement(np.zeros(new.num_nodes, np.int32), cluster), tmp_path / "p.pb")


def test_place_recompute_on_writes_the_copies_that_pardnn_run_trains(prof, mlp, tmp_path):
    """The CLI path: `pardnn place --recompute on` chooses, places and writes the copies
    (placed_graph.pb, recompute.csv); `pardnn run`'s losses are the placement's without."""
    from pardnn.io.placement import read_recompute_csv
    from pardnn.tf.run import run_placed
    from pardnn_builtin_models import load_module
    out = str(tmp_path / "on")
    assert main(["place", prof[1], "--devices", "cpu:2", "--recompute", "on", "-o", out]) == 0
    rows = read_recompute_csv(os.path.join(out, "recompute.csv"))
    copies = {n for p, _, c in rows for n in (p, c) if original_name(n) is not None}
    assert len(copies) >= 6             # two layers or more, their MatMul, BiasAdd and relu
    plain = run_placed(mlp["placed"], load_module, 2)
    for config in ("pardnn", "default"):
        result = run_placed(out, load_module, 2, config=config)
        ran = {n.node_name for d in result.check.run_metadata.step_stats.dev_stats for n in d.node_stats}
        assert result.check.moved == [] and result.losses == pytest.approx(plain.losses, rel=1e-6)
        assert copies <= ran if config == "pardnn" else len(copies & ran) >= len(copies) // 4


def test_copies_run_in_a_session_with_no_config_at_all(one):
    """tf.compat.v1.Session()'s own ConfigProto (Grappler on, one CPU device): the copies
    of the one-device placement that compute (float outputs) ran unless their original
    was rewritten away too."""
    mlp = one
    rc = measured(mlp["rc"], None, mlp["copies"])
    assert rc["moved"] == [] and rc["loss"] == pytest.approx(unplaced_loss(mlp["placed"]), rel=1e-6)
    nodes = {n.name: n for n in read_graph_def(os.path.join(mlp["rc"], "placed_graph.pb")).node}
    merged = [c for c in mlp["copies"] if c not in rc["ran"] and original_name(c) in rc["ran"]
              and nodes[c].attr["T"].type == 1]
    assert merged == [] and len(rc["copies_ran"]) >= len(mlp["copies"]) // 4

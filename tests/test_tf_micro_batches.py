"""`pardnn profile MODEL --micro-batches M` (pardnn.tf.micro_batches): the TF1 graph
rewritten as M micro-batches with one update trains as the unsplit one, for every
built-in family (per-micro-batch statistics where batch norm couples the samples),
end to end through place and run under TF's default config; bad counts and steps
that cannot be split are one-line errors."""

import json
import os

import pytest

import pardnn.tf.quiet_import  # noqa: F401  (quiet TensorFlow import first)
import tensorflow as tf

from pardnn.base.errors import UserError
from pardnn.cli import main
from pardnn.models import build_model, resolve_knobs
from pardnn_builtin_models import load_module
from pardnn.pipeline.schedule import SCHEDULES
from pardnn.tf.micro_batches import micro_batched_model
from pardnn.tf.run import run_placed, train

pytestmark = pytest.mark.tf
HERE = os.path.dirname(os.path.abspath(__file__))
STEPS = 3


def losses(model):
    with tf.compat.v1.Session(graph=model.graph) as session:
        session.run(model.init)
        return train(session, model.train_op, model.loss, model.feed, STEPS)


def unsplit_and_split(family, m, *settings):
    module = load_module(family)
    knobs = resolve_knobs(module, "tiny", settings)
    whole = build_model(module, family, knobs)
    split_model, split = micro_batched_model(module, family, knobs, m)
    return losses(whole), losses(split_model), split, whole, split_model


@pytest.mark.slow
@pytest.mark.parametrize("family, m, settings", [
    ("mlp", 4, ()), ("word-rnn", 2, ()), ("char-crn", 2, ("dropout=0.0",)),
    ("transformer", 2, ("dropout=0.0",)), ("e3d", 2, ())])
def test_a_split_step_trains_as_the_unsplit_one(family, m, settings):
    """Sparse gradients (word-rnn's embedding), gradient clipping, a loss that is a sum
    (e3d's): the same losses, step after step, up to rounding."""
    whole, split, info, before, after = unsplit_and_split(family, m, *settings)
    assert split == pytest.approx(whole, rel=1e-5)
    assert whole[0] != whole[-1]
    assert info.micro_batches == m and info.coupled == ()
    assert info.loss == ("sum" if family == "e3d" else "mean")
    ops = len(after.graph.get_operations())
    assert ops > len(before.graph.get_operations()) + (m - 1) * info.per_sample_ops * 0.9
    names = [op.name for op in after.graph.get_operations()]
    assert sum(n.startswith(f"micro_batch_{m - 1}/") for n in names) == info.per_sample_ops


@pytest.mark.slow
def test_batch_norm_gets_per_micro_batch_statistics_named():
    whole, split, info, _, _ = unsplit_and_split("wrn", 2)
    assert "group_0/block_0" in " ".join(info.coupled)
    assert not any(scope.startswith("gradients") for scope in info.coupled)
    assert split[0] != pytest.approx(whole[0], rel=1e-3)      # statistics of 1 sample, not 2: documented


def test_counts_that_do_not_divide_the_batch_are_refused(tmp_path, capsys):
    for m in ("0", "3", "5"):
        assert main(["profile", "mlp", "--size", "tiny", "--micro-batches", m, "-o", str(tmp_path / m)]) == 2
        assert (f"--micro-batches: {m} micro-batches cannot split mlp's batch of 4 samples (give a divisor of 4 "
                f"from 1 to 4)") in capsys.readouterr().err
        assert not (tmp_path / m).exists()


@pytest.mark.parametrize("mode, message", [
    ("max", "loss 'loss:0' is not a mean or a sum over the batch's samples (it reduces through Max)"),
    ("write", "writes a variable inside the per-sample part of the step")])
def test_a_step_that_cannot_be_split_is_named(mode, message):
    from pardnn_builtin_models import load_module as load
    script = os.path.join(HERE, "helpers", "micro_scripts.py")
    module = load(script)
    with pytest.raises(UserError, match="--micro-batches: ") as error:
        micro_batched_model(module, script, {"batch": 4, "mode": mode}, 2)
    assert message in str(error.value)


@pytest.mark.slow
@pytest.mark.parametrize("schedule", ["auto", "early-micro-batch"])
def test_profile_place_and_run_a_split_model_under_the_default_config(tmp_path, capsys, schedule):
    """Through the CLI: the split step placed (with the order it carries, forced or
    chosen), trained under TF's default config with nothing moved and the unsplit
    losses; an order's pairs run in order; explain emulates the same step again."""
    prof, placed = tmp_path / "prof", tmp_path / "placed"
    assert main(["profile", "word-rnn", "--size", "tiny", "--steps", "1", "--micro-batches", "2",
                 "-o", str(prof)]) == 0
    assert "micro-batches: 2 per step, one update" in capsys.readouterr().out
    assert main(["place", str(prof), "--devices", "cpu:4", "--schedule", schedule, "-o", str(placed)]) == 0
    out = capsys.readouterr().out
    report = json.loads((placed / "report.json").read_text())
    assert report["micro_batches"] == 2 and set(report["schedules"]) == set(SCHEDULES if schedule == "auto"
                                                                           else ("fifo", schedule))
    assert report["makespan_us"] == report["schedules"][report["schedule"]]
    assert 0.0 < report["bubble"] < 1.0 and f"order {report['schedule']} (tried: fifo" in out
    if schedule != "auto":
        assert report["schedule"] == schedule and (placed / "order.csv").exists()
    module = load_module("word-rnn")
    batch = resolve_knobs(module, "tiny")["batch"]          # the batch of the step, not of a micro-batch
    assert report["samples_per_step"] == batch and f"per sample ({batch} per step)" in out
    assert report["time_per_sample_us"] == pytest.approx(report["makespan_us"] / batch)
    unplaced = losses(build_model(module, "word-rnn", resolve_knobs(module, "tiny")))
    result = run_placed(placed, load_module, STEPS, config="default")
    assert result.check.moved == []
    assert len(result.check.nodes_per_device) == 4
    assert result.losses == pytest.approx(unplaced, rel=1e-5)
    capsys.readouterr()
    again = tmp_path / "emulated.json"
    assert main(["emulate", str(prof), "--placement", str(placed / "placement.csv"), "--devices", "cpu:4",
                 "--schedule", report["schedule"], "--report", str(again)]) == 0
    assert json.loads(again.read_text())["makespan_us"] == report["makespan_us"]
    assert main(["explain", str(placed)]) == 0                   # re-emulated with the order: the same step
    assert f"micro-batches: 2, in the order {report['schedule']} (each order: fifo " in capsys.readouterr().out


def test_a_bad_schedule_is_refused(tmp_path, capsys):
    assert main(["place", str(tmp_path), "--devices", "cpu:2", "--schedule", "zigzag", "-o", str(tmp_path / "o")]) == 2
    assert "--schedule: unknown schedule 'zigzag' (choose from auto, fifo, " in capsys.readouterr().err

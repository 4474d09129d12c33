"""The order lever carried into a real TF1 run (issue 51, item 2): word-rnn, placed on
one CPU device, with the first order the lever proposes (the big gradient sums one
after another, pardnn.pipeline.order_lever) written into placed_graph.pb as `^before`
control inputs, trains as the placed graph without it under pardnn's session config
and TF's default one (Grappler on): nothing moved, the same first loss, and TF's
allocator holds less over the step, about as much less as the emulator predicts.
One device: with two, the order in which TF's executor runs ready ops (and so the
peaks) changes from run to run even with every op in the calling thread."""

import pytest

import pardnn.tf.quiet_import  # noqa: F401  (quiet TensorFlow import first)

from pardnn.tf.graphdef import read_graph_def
from tools.bench_recompute_run import emulated_peaks, measured, place, profile, unplaced_loss, write_ordered

pytestmark = [pytest.mark.tf, pytest.mark.slow]


@pytest.fixture(scope="module")
def word_rnn(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("order_run"))
    prof = profile(root, "word-rnn", "tiny", [])
    placed, graph, cluster, device = place(prof, root, 1)
    ordered, ordered_device, edges = write_ordered(prof, placed, graph, cluster, device, placed + "_ordered")
    return {"placed": placed, "ordered_dir": placed + "_ordered", "edges": edges,
            "emulated": (emulated_peaks(graph, cluster, device)[0],
                         emulated_peaks(ordered, cluster, ordered_device)[0])}


def test_the_order_is_written_as_control_inputs(word_rnn):
    plain = read_graph_def(word_rnn["placed"] + "/placed_graph.pb")
    ordered = read_graph_def(word_rnn["ordered_dir"] + "/placed_graph.pb")

    def controls(graph_def):
        return sum(1 for n in graph_def.node for i in n.input if i.startswith("^"))
    assert word_rnn["edges"] > 0
    assert controls(ordered) == controls(plain) + word_rnn["edges"]


@pytest.mark.parametrize("config", ["pardnn", "default"])
def test_the_ordered_step_trains_as_placed_and_holds_less(word_rnn, config):
    plain, ordered = measured(word_rnn["placed"], config), measured(word_rnn["ordered_dir"], config)
    before, after = word_rnn["emulated"]
    print(f"measured peak: {plain['peaks']} -> {ordered['peaks']}; emulated: {before} -> {after}")
    assert plain["moved"] == [] and ordered["moved"] == []
    assert ordered["loss"] == plain["loss"] == pytest.approx(unplaced_loss(word_rnn["placed"]), rel=1e-6)
    assert after < 0.8 * before
    measured_share, emulated_share = ordered["peaks"][0] / plain["peaks"][0], after / before
    assert measured_share < 0.8 and abs(measured_share - emulated_share) < 0.1

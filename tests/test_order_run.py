"""An order carried by placed_graph.pb (pardnn.graph.order, written by
pardnn.tf.placed_graph) is what TF's executor really runs: a list schedule unlike
FIFO's, chained per device, trained on 2 CPU devices under pardnn's session config
and TF's default one (Grappler on): every ordered pair of ops that ran did so in the
order, nothing moved, and the losses are the unordered run's."""

import numpy as np
import pytest

import pardnn.tf.quiet_import  # noqa: F401  (quiet TensorFlow import first)

from pardnn.cli import main
from pardnn.emulator.scheduler import simulate
from pardnn.graph.order import device_chains, step_mask
from pardnn.hardware import parse_devices
from pardnn.io.placement import Placement, read_csv
from pardnn.pipeline.load import load_cost_graph
from pardnn_builtin_models import load_module
from pardnn.tf.placed_graph import write_placed_graph
from pardnn.tf.run import run_placed

pytestmark = [pytest.mark.tf, pytest.mark.slow]


@pytest.fixture(scope="module")
def placed(tmp_path_factory):
    root = tmp_path_factory.mktemp("order")
    assert main(["profile", "word-rnn", "--size", "tiny", "--steps", "1", "-o", str(root / "prof")]) == 0
    assert main(["place", str(root / "prof"), "--devices", "cpu:2", "--algorithm", "round-robin",
                 "-o", str(root / "placed")]) == 0
    graph, _ = load_cost_graph(str(root / "prof"))
    cluster = parse_devices("cpu:2")
    device = read_csv(str(root / "placed" / "placement.csv"), graph, cluster)
    plain = run_placed(root / "placed", load_module, 2)
    ranks = np.random.default_rng(0).permutation(graph.num_nodes)      # an order FIFO would not run
    listed = simulate(graph, cluster, device, ranks)
    order = device_chains(graph, device, listed.start, step_mask(graph, ["train_op", "loss:0"], ["init"]))
    write_placed_graph(root / "prof", graph, Placement(device, cluster), root / "placed" / "placed_graph.pb", order)
    fifo = simulate(graph, cluster, device).start
    return root, graph, order, plain, fifo


def ran_in_order(result, graph, order):
    """(pairs checked, pairs out of order): by the traced step's start and end times."""
    times = {}
    for dev in result.check.run_metadata.step_stats.dev_stats:
        for node in dev.node_stats:
            times[node.node_name] = (node.all_start_micros, node.all_start_micros + node.all_end_rel_micros)
    checked = wrong = 0
    for before, after in zip(order.before.tolist(), order.after.tolist()):
        b, a = graph.names[before], graph.names[after]
        if b in times and a in times:
            checked += 1
            wrong += times[a][0] < times[b][1]
    return checked, wrong


@pytest.mark.parametrize("config", ["pardnn", "default"])
def test_the_executor_runs_the_carried_order(placed, config):
    root, graph, order, plain, fifo = placed
    against = sum(fifo[a] < fifo[b] for b, a in zip(order.before.tolist(), order.after.tolist()))
    assert against > 10                                   # FIFO would run these pairs the other way
    result = run_placed(root / "placed", load_module, 2, config=config)
    assert result.check.moved == []
    checked, wrong = ran_in_order(result, graph, order)
    assert checked > len(order) // 2 and wrong == 0
    assert result.losses == pytest.approx(plain.losses, rel=1e-6)

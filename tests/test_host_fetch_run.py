"""The host-fetch lever carried into a real TF1 run (issue 51, item 2): an mlp with its
variables, slots and updates on CPU:1 (a host tier, as the memory repair leaves them)
and the rest on CPU:0, its weights read again for the backward pass with the reads
ordered by control edges (pardnn.pipeline.host_fetch, written by
pardnn.tf.placed_graph), trains step for step as the placement without the lever
under pardnn's session config and TF's default one: nothing moved, the second reads
ran, and the backward pass never read an updated weight (three steps' losses equal).
TF hands a tensor from one CPU device to another without a copy, so the allocator's
peaks cannot show the saving the emulator predicts on a GPU (tools/bench_recompute_run.py)."""

import pytest

import pardnn.tf.quiet_import  # noqa: F401  (quiet TensorFlow import first)

from pardnn.hardware import parse_devices
from pardnn.pipeline.load import load_cost_graph
from pardnn.tf.run import run_placed
from pardnn_builtin_models import load_module
from tools.bench_recompute_run import emulated_peaks, host_placed, measured, profile, write_host_fetched

pytestmark = [pytest.mark.tf, pytest.mark.slow]


@pytest.fixture(scope="module")
def fetched(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("host_fetch_run"))
    prof = profile(root, "mlp", "small", ["layers=6", "hidden=256", "batch=64"])
    graph, _ = load_cost_graph(prof)
    cluster = parse_devices("cpu:2")
    placed, device = host_placed(prof, root, graph, cluster)
    new, new_device, copies = write_host_fetched(prof, placed, graph, cluster, device, placed + "_fetched", 4096)
    return {"placed": placed, "fetched": placed + "_fetched", "copies": copies,
            "emulated": (emulated_peaks(graph, cluster, device), emulated_peaks(new, cluster, new_device))}


def test_the_lever_reads_the_weights_again_and_the_emulator_frees_them(fetched):
    assert len(fetched["copies"]) == 7
    before, after = fetched["emulated"]
    assert after[0] < 0.8 * before[0]           # the weights' copies on device 0, between their two uses


@pytest.mark.parametrize("config", ["pardnn", "default"])
def test_the_fetched_step_trains_as_placed_step_for_step(fetched, config):
    plain = run_placed(fetched["placed"], load_module, 3, config)
    refetched = run_placed(fetched["fetched"], load_module, 3, config)
    assert plain.check.moved == [] and refetched.check.moved == []
    assert refetched.losses == plain.losses


def test_the_second_reads_run(fetched):
    run = measured(fetched["fetched"], "pardnn", fetched["copies"])
    assert run["copies_ran"] == sorted(fetched["copies"]) and run["moved"] == []

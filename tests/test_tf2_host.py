"""The host as a placement tier, run for real: four logical CPU devices, the last
playing the host (slower, `"host": true` in a cluster file, ample memory), the others
too small for a Keras model's weights and Adam slots. pardnn offloads part of the
optimizer state to the host; built under variables_placed, those variables are on the
host, and the placed step trains with the unplaced step's losses, no op moved by TF
(tests/helpers/keras_host_script.py). The same through pardnn.keras: plan, build in
plan.scope(), fit."""

import pytest

from helpers.script_run import script_facts

pytestmark = pytest.mark.tf
HOST = "/job:localhost/replica:0/task:0/device:CPU:3"


@pytest.fixture(scope="module")
def flow(tmp_path_factory):
    root = tmp_path_factory.mktemp("keras_host")
    return script_facts("keras_host_script.py", root)


@pytest.mark.slow
def test_optimizer_state_offloaded_to_the_host_trains_placed(flow):
    assert flow["variable_bytes"] >= 4 * flow["budget"]          # the three devices hold 3/4 at most
    assert flow["feasible"] and max(flow["peaks"][:3]) <= flow["budget"]
    assert flow["resident"][HOST] > 0                             # state went to the host...
    assert any(name.startswith("adam/") for name in flow["on_host"])     # ... optimizer slots among it
    assert flow["host_built"] == flow["on_host"]                  # built there, and nothing else
    assert flow["moved"] == []                                    # every op ran where placed
    assert flow["per_device"][HOST] > 0
    assert flow["placed"] == pytest.approx(flow["unplaced"], rel=1e-6)
    assert flow["placed"][0] == flow["unplaced"][0]               # the unplaced first loss, bit for bit


@pytest.mark.slow
def test_a_keras_plan_builds_the_host_variables_on_the_host_and_fits_unmoved(flow):
    assert flow["planned_on_host"] > 0 and flow["built_on_host"] == flow["planned_on_host"]
    assert flow["keras_moved"] == []
    assert flow["keras_placed"] == pytest.approx(flow["keras_unplaced"], rel=1e-6)
    assert flow["keras_placed"][0] == flow["keras_unplaced"][0]
    assert flow["inputs_memory"] == [str(flow["budget"]), str(1 << 30)]   # explain rebuilds the same cluster

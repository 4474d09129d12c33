"""The optional keras-apps check (issue 52): the README's three lines on models of
keras.applications and keras_hub that nobody here wrote, built with weights=None and
small inputs (script tests/helpers/keras_apps_script.py, one subprocess per model on 4
logical CPU devices): planned at half the bytes of their weights and Adam slots per
device, built in `plan.scope()`, trained 2 steps with `fit`.

Slow (minutes per model on 2 cores), so it runs only when asked or where the extra is
installed, and skips otherwise:

    PARDNN_KERAS_APPS=1 python -m pytest -q -n 0 tests/test_keras_apps.py
    pip install -e '.[test,keras-apps]'     # keras_hub: then it runs in the suite too

PARDNN_KERAS_APPS=0 skips it where the extra is installed; `-m "not keras_apps"`
deselects it. The keras_hub model skips where keras_hub is not installed. docs/tf2.md
("Measured: keras.applications and keras_hub models") lists the models.
"""

import importlib.util
import json
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ASKED = os.environ.get("PARDNN_KERAS_APPS", "")
HUB = importlib.util.find_spec("keras_hub") is not None
RUN = ASKED == "1" or (ASKED != "0" and HUB)

pytestmark = [pytest.mark.tf, pytest.mark.slow, pytest.mark.keras_apps,
              pytest.mark.skipif(not RUN, reason="keras-apps: set PARDNN_KERAS_APPS=1, or install the extra "
                                                 "(pip install -e '.[test,keras-apps]')")]

MODELS = ["convnext", "convnext_stochastic_depth", "efficientnet", "densenet", "dict_inputs", "bert"]


def facts_of(name, root):
    proc = subprocess.run([sys.executable, os.path.join(HERE, "helpers", "keras_apps_script.py"), name, str(root)],
                          capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("name", MODELS)
def test_a_model_nobody_here_wrote_trains_placed_as_unplaced(tmp_path, name):
    if name == "bert" and not HUB:
        pytest.skip("keras_hub is not installed (the keras-apps extra)")
    facts = facts_of(name, tmp_path)
    assert facts["fits"] and facts["memory"] * 2 <= facts["state_bytes"]    # half the weights and slots
    assert facts["moved"] == []                                             # every op ran where placed
    assert len(facts["per_device"]) == 4
    assert len(facts["variable_devices"]) >= 2                              # the model is spread
    assert facts["placed"][0] == facts["unplaced"][0]                       # the same first loss, bit for bit
    assert facts["placed"] == pytest.approx(facts["unplaced"], rel=1e-5)

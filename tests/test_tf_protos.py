"""Profiles are read and placed graphs written without importing TensorFlow, and what
that reads is what TensorFlow's own registries would have given."""

import json
import shutil
import subprocess
import sys

import numpy as np
import pytest

import pardnn.tf.quiet_import  # noqa: F401  (quiet TensorFlow import first)
import tensorflow as tf

from pardnn.cli import main
from pardnn.tf.op_defs import OP_DEFS_FILE
from pardnn.tf.profile_loader import load_profile
from pardnn.tf.protos import DTYPE_SIZE

pytestmark = pytest.mark.tf

# `pardnn place` of a profile dir in a fresh interpreter; prints which heavy modules it loaded.
PLACE_WITHOUT_TF = """
import sys
from pardnn.cli import main
code = main(["place", sys.argv[1], "--devices", "cpu:2", "-o", sys.argv[2]])
print(code, "tensorflow" in sys.modules)
"""


@pytest.fixture(scope="module")
def mlp_profile(tmp_path_factory):
    root = tmp_path_factory.mktemp("prof") / "mlp"
    assert main(["profile", "mlp", "--size", "tiny", "--steps", "1", "-o", str(root)]) == 0
    return root


def test_dtype_sizes_are_tensorflows():
    for enum in range(1, len(DTYPE_SIZE)):
        try:
            size = tf.dtypes.as_dtype(enum).size
        except TypeError:
            size = 0
        assert DTYPE_SIZE[enum] == size, tf.dtypes.as_dtype(enum).name


def test_profile_records_op_defs_and_cpu_only_ops(mlp_profile):
    doc = json.loads((mlp_profile / "profile.json").read_text())
    assert "cpu_only_ops" in doc and (mlp_profile / OP_DEFS_FILE).stat().st_size > 0


def test_recorded_op_defs_load_the_same_graph_as_tensorflows_registry(mlp_profile, tmp_path):
    old = tmp_path / "old"                        # a profile written before op_defs.pb existed
    shutil.copytree(mlp_profile, old)
    (old / OP_DEFS_FILE).unlink()
    recorded, _ = load_profile(str(mlp_profile))
    registry, _ = load_profile(str(old))
    for field in ("out_bytes", "persist_bytes", "kind", "group", "edge_bytes", "edge_src", "edge_dst"):
        assert np.array_equal(getattr(recorded, field), getattr(registry, field)), field
    assert recorded.pinned == registry.pinned


def test_place_of_a_profile_dir_does_not_import_tensorflow(mlp_profile, tmp_path):
    out = subprocess.run([sys.executable, "-c", PLACE_WITHOUT_TF, str(mlp_profile), str(tmp_path / "placed")],
                         capture_output=True, text=True, check=True)
    assert out.stdout.split()[-2:] == ["0", "False"]
    assert (tmp_path / "placed" / "placed_graph.pb").stat().st_size > 0


def test_a_truncated_op_defs_file_is_one_line_naming_it(mlp_profile, tmp_path, capsys):
    bad = tmp_path / "bad"
    shutil.copytree(mlp_profile, bad)
    (bad / OP_DEFS_FILE).write_bytes(b"\x0a\xff\xff")
    assert main(["place", str(bad), "--devices", "cpu:2", "-o", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and OP_DEFS_FILE in err[0] and not (tmp_path / "out").exists()

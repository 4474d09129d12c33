"""The `real` sizes: the thesis' tensor dimensions on the `thesis` graphs, built without
allocating their tensors; a script without such a size is refused with the valid ones."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

from pardnn.cli import main
from pardnn.models import resolve_knobs
from pardnn_builtin_models import load_module

# Knobs that set a family's node count (layers, unrolled steps, blocks): `real` keeps
# the `thesis` values of these and changes only tensor dimensions and batch.
STRUCTURE = {
    "word-rnn": ["layers", "seq"],
    "char-crn": ["layers", "seq", "max_width", "highway"],
    "wrn": ["units"],
    "transformer": ["layers"],
    "e3d": ["layers", "frames", "input_frames"],
}


@pytest.mark.parametrize("family", sorted(STRUCTURE))
def test_real_keeps_the_thesis_structure_with_larger_dimensions(family):
    module = load_module(family)
    thesis, real = resolve_knobs(module, "thesis"), resolve_knobs(module, "real")
    assert {k: real[k] for k in STRUCTURE[family]} == {k: thesis[k] for k in STRUCTURE[family]}
    assert real["batch"] > thesis["batch"]
    assert any(real[k] >= 16 * thesis[k] for k in ("hidden", "model", "width") if k in real)


def test_real_size_for_a_script_without_it_names_the_valid_sizes(tmp_path, capsys):
    script = tmp_path / "model.py"
    script.write_text("KNOBS = {'batch': 2}\nSIZES = {'tiny': {'batch': 1}}\n"
                      "def build(batch):\n    raise AssertionError('not built')\n")
    out = tmp_path / "prof"
    assert main(["profile", str(script), "--size", "real", "--estimate", "dgx-h100", "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--size: unknown size 'real' (choose from tiny)" in err
    assert not out.exists()


@pytest.mark.slow
@pytest.mark.tf
def test_estimating_real_word_rnn_never_allocates_its_parameters(tmp_path):
    """word-rnn real has 0.34e9 float32 parameters (1.36 GB; 4.1 GB with Adam's slots):
    building and estimating it in a fresh process adds less than the parameters' size to
    what a process that only imports the same modules holds, so no variable was
    materialised."""
    code = textwrap.dedent(f"""
        import resource, sys
        from pardnn.cli import main
        import pardnn.tf.quiet_import, pardnn.tf.estimate, pardnn_builtin_models.word_rnn
        code = main(["profile", "word-rnn", "--size", "real", "--estimate", "dgx-h100",
                     "-o", {str(tmp_path / "prof")!r}]) if sys.argv[1] == "build" else 0
        print(code, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
    """)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    runs = [subprocess.run([sys.executable, "-c", code, what], capture_output=True, text=True, env=env,
                           timeout=600) for what in ("imports", "build")]
    (_, baseline), (status, peak) = (done.stdout.split()[-2:] for done in runs)
    assert status == "0", runs[1].stderr[-2000:]
    params = 8 * (2 * 2048 * 4 * 2048 + 4 * 2048) + 2 * 17500 * 2048 + 17500
    assert 0.33e9 < params < 0.35e9
    assert int(peak) - int(baseline) < 4 * params
    costs = json.loads((tmp_path / "prof" / "profile.json").read_text())["costs"]
    assert costs["peak_memory_bytes"] > 4 * params          # Grappler still sees the full tensors

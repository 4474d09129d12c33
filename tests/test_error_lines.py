"""No error line on stderr when nothing is wrong: the README's Keras example
(examples/keras_fit.py) and `pardnn profile --estimate`, each run as a user runs it,
in a subprocess. An estimate once logged TensorFlow's `E... utils.cc:80] Failed to get
device properties` once per op on a machine without a GPU (pardnn.tf.estimate,
GRAPPLER_DEVICE).

The example imports TensorFlow itself, before pardnn, and starts its runtime; what TF
prints then on its own (on a machine without CUDA: `failed call to cuInit`) is not
pardnn's doing: a bare script that starts TF's runtime the same way gives the lines
left out, by their source location."""

import os
import re
import subprocess
import sys

import pytest

pytestmark = pytest.mark.tf
HERE = os.path.dirname(os.path.abspath(__file__))
# absl's C++ log lines of severity ERROR or FATAL ("E0000 00:00:17... 123 utils.cc:80] ...")
# and Python's tracebacks and uncaught errors
CPP_ERROR = re.compile(r"^[EF]\d{4} \S+\s+\d+ ([\w.]+:\d+)\] ")
PY_ERROR = re.compile(r"^(Traceback |\w*(Error|Exception): )")
BARE_TF = ("import tensorflow as tf\n"
           "tf.config.list_physical_devices('CPU')\n"
           "print(float(tf.constant(1.0) + 1))\n")


def error_lines(stderr: str) -> list:
    """(source location or "python", line) of each error line of `stderr`."""
    found = []
    for line in stderr.splitlines():
        match = CPP_ERROR.match(line)
        if match:
            found.append((match.group(1), line))
        elif PY_ERROR.match(line):
            found.append(("python", line))
    return found


def test_error_lines_are_told_from_the_others():
    stderr = ("I0000 00:00:1795917984.404722    4352 cudart_stub.cc:31] Could not find cuda drivers\n"
              "E0000 00:00:1795917987.551537    4352 utils.cc:80] Failed to get device properties, error code: 302\n"
              "W0000 00:00:1795917987.551537    4352 grappler.cc:9] a warning\n"
              "Traceback (most recent call last):\n"
              "ValueError: bad\n"
              "F0000 00:00:1795917987.551537 12 cuda.cc:7] fatal\n")
    assert [where for where, _ in error_lines(stderr)] == ["utils.cc:80", "python", "python", "cuda.cc:7"]


def run(args, cwd):
    return subprocess.Popen([sys.executable, *args], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """stdout and stderr of the example, the estimate and the bare TF script, run at
    once (two of them mostly wait on one Python thread)."""
    root = tmp_path_factory.mktemp("error_lines")
    procs = {"example": run([os.path.join(HERE, "..", "examples", "keras_fit.py")], root),
             "estimate": run(["-m", "pardnn", "profile", "mlp", "--size", "tiny", "--estimate", "dgx-h100",
                              "-o", str(root / "estimated")], root),
             "bare": run(["-c", BARE_TF], root)}
    try:
        out = {name: proc.communicate(timeout=600) for name, proc in procs.items()}
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    for name, proc in procs.items():
        assert proc.returncode == 0, f"{name}: {out[name][1][-3000:]}"
    return out


def pardnns_error_lines(runs, name) -> list:
    """The error lines of run `name` that the bare TF script does not print too."""
    tf_own = {where for where, _ in error_lines(runs["bare"][1]) if where != "python"}
    return [line for where, line in error_lines(runs[name][1]) if where not in tf_own]


@pytest.mark.slow
def test_the_readmes_keras_example_prints_no_error_line(runs):
    stdout, _ = runs["example"]
    assert "pardnn: " in stdout and "Epoch 2/2" in stdout
    assert pardnns_error_lines(runs, "example") == []


@pytest.mark.slow
def test_an_estimated_profile_prints_no_error_line(runs):
    stdout, stderr = runs["estimate"]
    assert "estimated mlp" in stdout and "Grappler scheduled" in stdout
    assert error_lines(stderr) == []

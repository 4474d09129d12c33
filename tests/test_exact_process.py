"""The exact candidate where TensorFlow was imported before OR-Tools (CP-SAT would crash
in that process, google/or-tools#3230): it solves in a fresh interpreter and gives the
same placement and bound as in a process that imported OR-Tools first."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np

from pardnn.hardware import parse_devices
from pardnn.placers import exact

from tools.synth_graph import synth_graph

# TensorFlow first, then the exact model; prints whether it solved apart, and its answer.
TF_FIRST = """
import json, sys
import tensorflow
from tools.synth_graph import synth_graph
from pardnn.hardware import parse_devices
from pardnn.placers import exact
solved = exact.solve(synth_graph(60, seed=3), parse_devices("cpu:3"))
print(json.dumps([exact._tensorflow_first(), solved.placements[0].tolist(), solved.bound_us]))
"""


def test_tensorflow_first_solves_apart_with_the_same_answer():
    out = subprocess.run([sys.executable, "-c", TF_FIRST], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[1])
    apart, placement, bound = json.loads(out.stdout.strip().splitlines()[-1])
    here = exact.solve_here(synth_graph(60, seed=3), parse_devices("cpu:3"))
    assert apart is True
    assert np.array_equal(placement, here.placements[0]) and bound == here.bound_us


def test_ortools_first_solves_here():
    assert not exact._tensorflow_first()            # conftest imports OR-Tools first

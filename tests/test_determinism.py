"""Same inputs, same placement, for every registered algorithm: in one process and
across processes whose string hashing differs (PYTHONHASHSEED), with a memory
limit tight enough that the overflow repair moves nodes too."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from pardnn.emulator import evaluate
from pardnn.hardware import parse_devices
from pardnn.pipeline.place import place
from pardnn.placers import registry

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
from synth_graph import synth_graph  # noqa: E402

DEVICES = "2xcpu:2"                      # two hosts, so pardnn-hier has a choice too

SCRIPT = """
import json, sys
sys.path.insert(0, sys.argv[1])
from synth_graph import synth_graph
from pardnn.hardware import parse_devices
from pardnn.pipeline.place import place
from pardnn.placers import registry
g = synth_graph(400, seed=5)
cluster = parse_devices(sys.argv[2]).with_options(memory=int(sys.argv[3]), reserve=0.0)
print(json.dumps({name: place(g, cluster, name)[0].device.tolist() for name in registry.names()}))
"""


def tight_memory(graph):
    """Bytes per device: 60% of the one-device peak, so every placer's first answer
    is likely to overflow somewhere and the repair has work to do."""
    one = parse_devices("cpu:1").with_options(memory=2**50)
    return int(0.6 * evaluate(graph, one, np.zeros(graph.num_nodes, np.int32))["peak_memory_bytes"][0])


@pytest.fixture(scope="module")
def case():
    g = synth_graph(400, seed=5)
    return g, parse_devices(DEVICES).with_options(memory=tight_memory(g), reserve=0.0)


@pytest.mark.parametrize("name", registry.names())
def test_same_input_same_placement_in_one_process(case, name):
    g, cluster = case
    first, report = place(g, cluster, name)
    second, _ = place(g, cluster, name)
    assert np.array_equal(first.device, second.device)
    assert report["feasible"]


def test_every_algorithm_is_covered():
    assert set(registry.names()) >= {"pardnn", "pardnn-hier", "round-robin", "single", "topo",
                                     "etf", "heft", "linear", "metis"}


def test_same_input_same_placement_across_hash_seeds(case):
    g, cluster = case
    tools = str(Path(__file__).resolve().parents[1] / "tools")
    runs = []
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        out = subprocess.run([sys.executable, "-c", SCRIPT, tools, DEVICES, str(int(cluster.memory[0]))],
                             env=env, capture_output=True, text=True, check=True).stdout
        runs.append(json.loads(out))
    assert sorted(runs[0]) == sorted(registry.names())
    for name in registry.names():
        assert runs[0][name] == runs[1][name], name
        assert runs[0][name] == place(g, cluster, name)[0].device.tolist(), name

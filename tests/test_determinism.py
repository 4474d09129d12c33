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

from pardnn.pipeline.report import evaluate
from pardnn.hardware import parse_devices
from pardnn.pipeline.place import place
from pardnn.placers import registry

from helpers.training_chain import one_device_peak, training_chain
from tools.synth_graph import synth_graph

DEVICES = "2xcpu:2"                      # two hosts, so pardnn-hier has a choice too

SCRIPT = """
import json, sys
from tools.synth_graph import synth_graph
from pardnn.hardware import parse_devices
from pardnn.pipeline.place import place
from pardnn.placers import registry
g = synth_graph(400, seed=5)
cluster = parse_devices(sys.argv[1]).with_options(memory=int(sys.argv[2]), reserve=0.0)
print(json.dumps({name: place(g, cluster, name)[0].device.tolist() for name in registry.names()}))
"""


def tight_memory(graph):
    """Bytes per device: 60% of the one-device peak, so every placer's first answer
    is likely to overflow somewhere and the repair has work to do."""
    one = parse_devices("cpu:1").with_options(memory=2**50)
    return int(0.6 * evaluate(graph, one, np.zeros(graph.num_nodes, np.int32)).peak_memory_bytes[0])


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
    assert report.feasible


def test_every_algorithm_is_covered():
    assert set(registry.names()) >= {"pardnn", "pardnn-hier", "round-robin", "single", "topo",
                                     "etf", "heft", "linear", "metis"}


def test_same_input_same_placement_across_hash_seeds(case):
    g, cluster = case
    root = Path(__file__).resolve().parents[1]
    runs = []
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        out = subprocess.run([sys.executable, "-c", SCRIPT, DEVICES, str(int(cluster.memory[0]))],
                             env=env, capture_output=True, text=True, check=True, cwd=root).stdout
        runs.append(json.loads(out))
    assert sorted(runs[0]) == sorted(registry.names())
    for name in registry.names():
        assert runs[0][name] == runs[1][name], name
        assert runs[0][name] == place(g, cluster, name)[0].device.tolist(), name


CLI_SCRIPT = """
import contextlib, io, sys
from pardnn.cli import main
from pardnn.placers import registry
for name in registry.names():
    with contextlib.redirect_stdout(io.StringIO()):
        code = main(["place", sys.argv[1], "--devices", "cpu:8", "--algorithm", name, "-o", sys.argv[2] + "/" + name])
    assert code == 0, name
"""


def test_placement_csv_is_the_same_on_one_cpu_and_on_all(tmp_path):
    """Every placer through `pardnn place`, once with one thread, one CPU of affinity
    and OpenBLAS's oldest kernel (as on another CPU model), once with everything this
    machine has: placement.csv byte for byte. The graph (cpu:8) has cost ties whose
    winner, before Step 1 stopped using BLAS, hung on the last bit BLAS rounded."""
    g = synth_graph(600, seed=1)
    path = tmp_path / "g.json"
    g.to_json(str(path))
    assert len(np.unique(g.comp_us)) < g.num_nodes                  # ties exist
    one_cpu = {"OMP_NUM_THREADS": "1", "NUMBA_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
               "MKL_NUM_THREADS": "1", "OPENBLAS_CORETYPE": "Prescott"}
    base = {k: v for k, v in os.environ.items() if k not in one_cpu}
    cpus = sorted(os.sched_getaffinity(0))
    runs = {"one": (one_cpu, cpus[:1]), "all": ({}, cpus)}
    for label, (extra, affinity) in runs.items():
        subprocess.run([sys.executable, "-c", CLI_SCRIPT, str(path), str(tmp_path / label)],
                       env={**base, **extra}, preexec_fn=lambda a=affinity: os.sched_setaffinity(0, a),
                       check=True, capture_output=True)
    for name in registry.names():
        one = (tmp_path / "one" / name / "placement.csv").read_bytes()
        assert one == (tmp_path / "all" / name / "placement.csv").read_bytes(), name


def test_placement_csv_is_the_same_with_one_worker_and_with_three(tmp_path, monkeypatch):
    """`pardnn place` with its candidates built in worker processes (the threshold
    lowered from PARALLEL_MIN_NODES to every graph), once with one worker and once with
    three, and once with none: placement.csv byte for byte, and the same candidates in
    report.json in the same order. A 5-layer training chain at 0.78x its one-device peak
    on 2 devices: the memory binds (the repair moves Step 1's nodes), and `stages` and
    `metis` tie, so collecting candidates in the order workers finish them, not the
    registry's, changes the winner with the worker count."""
    from pardnn.cli import main
    from pardnn.pipeline import workers

    g = training_chain(layers=5)
    path = tmp_path / "g.json"
    g.to_json(str(path))
    memory = str(int(0.78 * one_device_peak(g)))
    runs = {}
    for label, cpus in (("none", 1), ("one", 2), ("three", 4)):
        monkeypatch.setattr(workers, "PARALLEL_MIN_NODES", 0)
        monkeypatch.setattr(workers, "usable_cpus", lambda cpus=cpus: cpus)
        out = tmp_path / label
        assert main(["place", str(path), "--devices", "cpu:2", "--memory", memory, "--reserve", "0",
                     "-o", str(out)]) == 0
        report = json.loads((out / "report.json").read_text())
        runs[label] = ((out / "placement.csv").read_bytes(),
                       [(n, c.get("makespan_us")) for n, c in report["candidates"].items()])
    assert report["candidates"]["step1"]["moved_nodes"] > 0        # the memory binds
    assert runs["one"] == runs["none"]
    assert runs["three"] == runs["none"]

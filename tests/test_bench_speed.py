"""tools/bench_speed.py --profile on a small cost graph JSON: the placement as `pardnn
place` makes it, with its stage seconds."""

import subprocess
import sys
from pathlib import Path

from tools.bench_speed import measure_profile
from tools.synth_graph import synth_graph

from pardnn.hardware import parse_devices
from pardnn.pipeline.place import place


def test_a_profile_is_placed_as_pardnn_place_places_it(tmp_path):
    g = synth_graph(800, seed=2)
    path = tmp_path / "g.json"
    g.to_json(str(path))
    row = measure_profile("pardnn", str(path), "cpu:3", "")
    _, report = place(g, parse_devices("cpu:3"), "pardnn")
    assert row["nodes"] == g.num_nodes
    assert row["makespan_ms"] == report.makespan_us / 1e3
    assert {"slicing", "mapping", "refine", "repair", "evaluate"} <= set(row["stages"])
    assert row["winner"] == report.candidate


def test_a_json_profile_is_placed_without_importing_tensorflow(tmp_path):
    path = tmp_path / "g.json"
    synth_graph(300, seed=2).to_json(str(path))
    script = ("import sys; from tools.bench_speed import measure_profile; "
              f"measure_profile('pardnn', {str(path)!r}, 'cpu:2', ''); print('tensorflow' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[1]).stdout
    assert out.split() == ["False"]

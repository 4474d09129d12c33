"""pardnn explain on real profiles: the quick start's (README: mlp profiled on cpu:1,
placed on cpu:4) and a Keras plan's (README's TF2 section), checked against report.json:
every node in one layer, the layers' sums equal to the devices' totals, the critical
path's shares adding up to the step, the memory categories to each peak."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from pardnn.cli import main

pytestmark = [pytest.mark.slow, pytest.mark.tf]
HERE = os.path.dirname(os.path.abspath(__file__))


def check_against_report(explanation, report):
    """The explanation's numbers are those of report.json's emulation."""
    step = explanation["step"]
    assert step["makespan_us"] == report["makespan_us"] and step["lower_bound_us"] == report["lower_bound_us"]
    path = step["path"]
    assert path["compute_us"] + path["transfer_us"] + path["device_wait_us"] == pytest.approx(report["makespan_us"])
    assert sum(r["total_us"] for r in step["path_by_layer"]) == pytest.approx(report["makespan_us"])
    table = explanation["layers"]["table"]
    assert len(table) == explanation["layers"]["count"]
    assert np.sum([r["nodes"] for r in table], axis=0).tolist() == report["nodes_per_device"]
    assert sum(map(sum, (r["nodes"] for r in table))) == report["num_nodes"]
    assert np.sum([r["busy_us"] for r in table], axis=0) == pytest.approx(report["busy_us"])
    for d, peak in enumerate(explanation["memory"]):
        assert sum(peak["categories"].values()) == peak["peak_bytes"] == report["peak_memory_bytes"][d]
        assert sum(r["total"] for r in peak["layers"]) == peak["peak_bytes"]
    for row in step["devices"]:
        assert row["busy_us"] + row["idle_inputs_us"] + row["idle_nothing_us"] == pytest.approx(report["makespan_us"])


def test_the_quick_starts_placement_explained(tmp_path, capsys):
    assert main(["profile", "mlp", "--devices", "cpu:1", "--steps", "2", "-o", str(tmp_path / "prof")]) == 0
    assert main(["place", str(tmp_path / "prof"), "--devices", "cpu:4", "-o", str(tmp_path / "placed")]) == 0
    capsys.readouterr()
    assert main(["explain", str(tmp_path / "placed"), "--json", str(tmp_path / "e.json")]) == 0
    assert "What would help" in capsys.readouterr().out
    e = json.loads((tmp_path / "e.json").read_text())
    check_against_report(e, json.loads((tmp_path / "placed" / "report.json").read_text()))
    assert e["layers"]["by"] == "name scope" and e["layers"]["loss"] == "loss"
    assert {"layer0", "layer1", "logits"} <= {r["layer"] for r in e["layers"]["table"]}
    held = {key: sum(p["categories"][key] for p in e["memory"]) for key in e["memory"][0]["categories"]}
    # Adam: two slots per weight, and beta1_power and beta2_power (a few hundred bytes)
    assert held["variables"] > 0 and 0 < held["optimizer_state"] - 2 * held["variables"] < 1024
    ran = {row["change"]: row for row in e["what_if"]}
    assert ran["3 devices (one fewer)"]["makespan_us"] > 0 and ran["5 devices (one more)"]["makespan_us"] > 0


def test_a_keras_plan_explained_by_keras_layer_paths(tmp_path):
    proc = subprocess.run([sys.executable, os.path.join(HERE, "helpers", "keras_explain_script.py"), str(tmp_path)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    e = json.loads((tmp_path / "explain.json").read_text())
    check_against_report(e, json.loads((tmp_path / "placed" / "report.json").read_text()))
    assert e["layers"]["by"] == "Keras layer path"
    names = {r["layer"] for r in e["layers"]["table"]}
    assert {f"sequential/dense_{i}" for i in range(1, 13)} | {"sequential/dense"} <= names
    held = {key: sum(p["categories"][key] for p in e["memory"]) for key in e["memory"][0]["categories"]}
    assert held["variables"] > 0 and held["optimizer_state"] > held["variables"] and held["gradients"] > 0

"""report.json as one typed Report: its page is current, what `place` writes is its
fields, and `emulate` agrees with `place` on the same placement."""

import json
from dataclasses import fields

from pardnn.cli import main
from pardnn.pipeline.report import Report
from tools.report_doc import PAGE, page
from tools.synth_graph import synth_graph


def test_docs_report_md_is_made_from_the_fields():
    with open(PAGE, encoding="utf-8") as f:
        assert f.read() == page(), "docs/report.md is stale: run `python -m tools.report_doc`"


def test_every_field_is_documented_in_a_known_section():
    from pardnn.pipeline.report import SECTIONS
    for f in fields(Report):
        assert f.metadata["section"] in SECTIONS and f.metadata["doc"], f.name


def test_place_writes_report_fields_and_emulate_agrees(tmp_path, capsys):
    path = tmp_path / "g.json"
    synth_graph(300, seed=3).to_json(str(path))
    out = tmp_path / "out"
    assert main(["place", str(path), "--devices", "cpu:3", "-o", str(out)]) == 0
    placed = json.loads((out / "report.json").read_text())
    names = [f.name for f in fields(Report)]
    assert list(placed) == [n for n in names if n in placed]      # in the Report's order
    assert {"candidate", "candidates", "moved_nodes", "stage_seconds", "lower_bound_us"} <= set(placed)
    assert list(placed["stage_seconds"])[0] == "load" and list(placed["stage_seconds"])[-1] == "write"
    assert main(["emulate", str(path), "--placement", str(out / "placement.csv"), "--devices", "cpu:3",
                 "--report", str(tmp_path / "r.json")]) == 0
    emulated = json.loads((tmp_path / "r.json").read_text())
    emulation = [f.name for f in fields(Report) if f.metadata["section"] == "emulation"]
    assert {n: emulated.get(n) for n in emulation} == {n: placed.get(n) for n in emulation}
    assert emulated["algorithm"] == "placement.csv" and "candidates" not in emulated


def test_a_field_nothing_computed_is_absent():
    assert Report(algorithm="x", num_nodes=0).to_json() == {"algorithm": "x", "num_nodes": 0}


def test_samples_per_step_comes_from_the_profile_when_it_says():
    from pardnn.pipeline.report import samples_per_step
    assert samples_per_step({"knobs": {"batch": 16}}) == 16            # a built-in family
    assert samples_per_step({"batch": 8, "knobs": {"batch": 4}}) == 8   # a Keras plan's own
    assert samples_per_step(None) is None and samples_per_step({"knobs": {}}) is None
    assert samples_per_step({"batch": True}) is None and samples_per_step({"batch": 0}) is None

"""The memory levers of run_placement in turn (pardnn.pipeline.place): none when the
step fits, an order when one makes it fit, recomputation only after that."""

import numpy as np
import pytest

from pardnn.base.errors import UserError
from pardnn.hardware import parse_devices
from pardnn.pipeline.place import place, run_placement
from pardnn.pipeline.portfolio import choose
from tests.test_memory_orders import GRAD, SUM, rnn_grads


def test_an_order_that_fits_is_carried_and_recomputes_nothing():
    graph = rnn_grads(weights=4, steps=4)
    roomy = parse_devices("cpu:2").with_options(memory=10**6, reserve=0.0)
    plain = run_placement(graph, roomy)
    assert plain.placement.order is None and plain.recomputation is None
    tight = roomy.with_options(memory=4 * GRAD + SUM + 8)
    with pytest.raises(UserError, match="^memory:"):            # in TF's own order nothing fits
        choose(graph, tight, "pardnn")
    placed = run_placement(graph, tight, recompute="off")
    assert placed.placement.schedule_name == "sum-order" and len(placed.placement.order) == 12
    assert placed.recomputation is None and placed.graph is graph
    assert np.all(placed.placement.profile.peak_bytes <= tight.capacity)
    _, report = place(graph, tight)
    assert report.to_json()["memory_order"] == {"name": "sum-order", "control_edges": 12}
    assert "recompute" not in report.to_json()


def test_explain_emulates_the_ordered_step_again(tmp_path, capsys):
    import json

    from pardnn.cli import main
    path = tmp_path / "rnn.json"
    rnn_grads(weights=4, steps=4).to_json(str(path))
    out = tmp_path / "placed"
    assert main(["place", str(path), "--devices", "cpu:2", "--memory", str(4 * GRAD + SUM + 8), "--reserve", "0",
                 "-o", str(out)]) == 0
    report = json.loads((out / "report.json").read_text())
    assert report["memory_order"]["name"] == "sum-order" and (out / "order.csv").exists()
    assert main(["explain", str(out), "--json", str(tmp_path / "e.json")]) == 0
    assert json.loads((tmp_path / "e.json").read_text())["step"]["makespan_us"] == report["makespan_us"]


def test_capacity_recomputes_at_the_devices_memory_when_nothing_else_fits(tmp_path):
    """A `pardnn capacity` row whose devices' memory fits only with recomputation is
    placed there as `pardnn place` places it, and its folder holds the copies."""
    import json

    from pardnn.cli import main
    from tests.test_recompute import chain, peak
    graph = chain(6)
    need, _ = peak(graph)
    path = tmp_path / "chain.json"
    graph.to_json(str(path))
    memory = str(need - 150_000)
    assert main(["capacity", str(path), "--devices", "cpu:2", "--memory", memory, "--reserve", "0",
                 "-o", str(tmp_path / "cap")]) == 0
    doc = json.loads((tmp_path / "cap" / "capacity.json").read_text())
    one = [r for r in doc["rows"] if r["devices"] == 1][0]
    assert one["fits_at_memory"] and one["recompute_at_memory"]["ops"] > 0
    assert "pardnn_recompute/" in (tmp_path / "cap" / "k1" / "placement.csv").read_text()
    _, report = place(graph, parse_devices("cpu:1").with_options(memory=int(memory), reserve=0.0))
    assert one["step_us_at_memory"] == report.makespan_us

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
    assert "memory order: sum-order, 12 control edges" in capsys.readouterr().out


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


def slow_host(gpu_memory):
    """tests.test_host_fetch's GPU beside a host whose MatMuls are 33x slower."""
    from pardnn.hardware import Cluster, Device
    from tests.test_host_fetch import gpu_and_host
    both = gpu_and_host()
    devices = (Device("/device:GPU:0", "GPU", gpu_memory),
               Device("/device:CPU:0", "CPU", 1 << 40, compute_rate=0.03, memory_rate=0.2, host_tier=True))
    return Cluster(devices, both.latency_us, both.bandwidth).with_options(reserve=0.0)


def test_the_host_fetch_lever_when_the_host_runs_matmuls(monkeypatch):
    """Weights kept on the host: where the placement without the lever runs MatMuls on
    the host for lack of GPU memory, the lever (each weight read again for the
    backward, the reads ordered) gives a shorter step, with no more of them there;
    with room on the GPU nothing changes. A placement with it is written for the refetched
    graph, which pardnn.pipeline.recompute.with_copies makes again from its names."""
    from pardnn.io.placement import Placement
    from pardnn.pipeline.levers import host_compute
    from pardnn.pipeline.recompute import with_copies
    from tests import test_host_fetch
    monkeypatch.setattr(test_host_fetch, "W", 4 << 20)          # weights of 4 MiB: worth holding back
    monkeypatch.setattr(test_host_fetch, "A", 40 << 10)
    graph = test_host_fetch.layers(4)
    tight = slow_host(18 << 20)
    plain = run_placement(graph, tight, fetch="off")
    placed = run_placement(graph, tight)
    assert placed.host_fetch is not None and placed.graph is placed.host_fetch.refetched
    assert placed.placement.schedule.makespan < plain.placement.schedule.makespan
    assert 0 < host_compute(placed, tight) <= host_compute(plain, tight)
    assert placed.placement.schedule_name == "host-fetch" and len(placed.placement.order) > 0
    again = with_copies(graph, placed.graph.names)
    assert again.names == placed.graph.names and np.array_equal(again.edge_src, placed.graph.edge_src)
    report = place(graph, tight)[1].to_json()
    assert report["host_fetch"]["reads"] == 4 and report["memory_order"]["name"] == "host-fetch"
    fetches = report["host_fetch"]["fetches"]
    assert sorted(f["weight"] for f in fetches) == sorted(placed.graph.names[o] for o in
                                                          placed.host_fetch.refetch.originals.tolist())
    assert report["host_fetch"]["bytes"] == 4 * (4 << 20) and all(f["bytes"] == 4 << 20 for f in fetches)
    # each weight crosses twice, its backward copy after its forward one, in the order of the reads
    assert all(f["forward_us"] < f["backward_us"] <= report["makespan_us"] for f in fetches)
    assert [f["forward_us"] for f in fetches] == sorted(f["forward_us"] for f in fetches)
    assert isinstance(placed.placement, Placement)
    roomy = slow_host(10**6)
    assert run_placement(graph, roomy).host_fetch is None


def test_capacity_finds_a_least_memory_recomputing_below_the_one_keeping(tmp_path, capsys):
    """`pardnn capacity --recompute on` bisects a second least memory, with
    recomputation, between the bound that holds whatever is recomputed and the least
    memory found keeping every activation; `pardnn place --recompute on` fits there,
    and `--recompute off` gives the rows without it."""
    import json

    from pardnn.cli import main
    from tests.test_recompute import chain
    path = tmp_path / "chain.json"
    chain(6).to_json(str(path))
    flags = ["--devices", "cpu:2", "--memory", "1MB", "--reserve", "0"]
    assert main(["capacity", str(path), *flags, "--recompute", "on", "-o", str(tmp_path / "on")]) == 0
    assert "recomputing" in capsys.readouterr().out
    rows = json.loads((tmp_path / "on" / "capacity.json").read_text())["rows"]
    for row in rows:
        least = row["least_memory_recomputing_bytes"]
        assert row["least_memory_recomputing_bound_bytes"] <= least < row["least_memory_bytes"]
        assert row["recompute_at_least_memory"]["ops"] > 0
        assert main(["place", str(path), "--devices", f"cpu:{row['devices']}", "--memory", str(least),
                     "--reserve", "0", "--recompute", "on", "-o", str(tmp_path / f"p{row['devices']}")]) == 0
    assert main(["capacity", str(path), *flags, "--recompute", "off", "-o", str(tmp_path / "off")]) == 0
    off = json.loads((tmp_path / "off" / "capacity.json").read_text())["rows"]
    assert [r["least_memory_bytes"] for r in off] == [r["least_memory_bytes"] for r in rows]
    assert not any("least_memory_recomputing_bytes" in r for r in off)


def test_capacity_beside_a_host_counts_the_gpus_and_shows_what_is_fetched(tmp_path, capsys, monkeypatch):
    """`pardnn capacity` on PRESET:K+host: a count is K GPUs with the host tier
    beside them, placed at the GPUs' own memory (the host keeps its own); where the
    placement there fetches weights from the host, capacity.json says which and when,
    the table says how many, and the count's placed dir explains them."""
    import json

    from pardnn.cli import main
    from tests import test_host_fetch
    monkeypatch.setattr(test_host_fetch, "W", 4 << 20)
    monkeypatch.setattr(test_host_fetch, "A", 40 << 10)
    path = tmp_path / "layers.json"
    test_host_fetch.layers(4).to_json(str(path))
    flags = ["--devices", "dgx-h100:1+host", "--memory", "18MiB", "--reserve", "0"]
    assert main(["capacity", str(path), *flags, "-o", str(tmp_path / "cap")]) == 0
    out = capsys.readouterr().out
    assert "1 device and the host: 4 weights (16.00 MiB) fetched from the host twice" in out
    doc = json.loads((tmp_path / "cap" / "capacity.json").read_text())
    assert doc["memory_bytes"] == 18 << 20 and [r["devices"] for r in doc["rows"]] == [1]
    fetch = doc["rows"][0]["host_fetch_at_memory"]
    assert fetch["reads"] == 4 and all(f["forward_us"] < f["backward_us"] for f in fetch["fetches"])
    inputs = json.loads((tmp_path / "cap" / "k1" / "inputs.json").read_text())
    assert inputs["devices"] == "dgx-h100:1+host"
    assert main(["explain", str(tmp_path / "cap" / "k1")]) == 0
    assert "weights fetched from the host (largest 4 of 4)" in capsys.readouterr().out
    assert main(["capacity", str(path), *flags, "--counts", "2"]) == 2
    assert "--counts: each count must be 1 to 1" in capsys.readouterr().err

"""Bad input a user can cause, through the command line: exit 2, one line on stderr
naming the file or flag, no traceback, inputs untouched, no output left behind
(no TensorFlow; the TF paths are in test_tf_bad_inputs.py)."""

import json

import pytest

from pardnn.cli import main
from pardnn.base.errors import GraphError
from pardnn.graph import CostGraph


def snapshot(folder):
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def fails(argv, needle, capsys, folder):
    """Run argv; assert exit 2, one line naming `needle`, and `folder` unchanged."""
    before = snapshot(folder)
    capsys.readouterr()
    try:
        code = main(argv)
    except SystemExit as exc:        # argparse's own errors
        code = exc.code
    assert code == 2
    captured = capsys.readouterr()
    assert captured.err.count("\n") == 1 and needle in captured.err, captured.err
    assert "Traceback" not in captured.err + captured.out
    assert snapshot(folder) == before
    return captured.err


@pytest.mark.parametrize("content, needle", [
    (b"a,0\nb,0\nc,1\n", "placement.csv:1: expected the header 'node,device'"),
    (b"", "placement.csv:1: expected the header 'node,device'"),
    (b"node,device\na,0\nb,1\na,1\nc,0\n", "placement.csv:4: node 'a' is listed twice"),
    (b"node,device\na,0\n\xff\xfe,1\nc,0\n", "--placement: "),
    (b"node,device\na,0\n\"b,1\nc,0\n" + b"x" * 140_000 + b"\n", "placement.csv:3: not a CSV row"),
    (b"node,device\na,0\nb,\xc2\xb2\nc,0\n", "placement.csv:3: device '\u00b2' is not in the cluster"),
])
def test_bad_placement_csv(chain_json, tmp_path, capsys, content, needle):
    csv_path = tmp_path / "placement.csv"
    csv_path.write_bytes(content)
    err = fails(["emulate", str(chain_json), "--placement", str(csv_path), "--devices", "cpu:2",
                 "--report", str(tmp_path / "r.json")], needle, capsys, tmp_path)
    assert str(csv_path) in err


def test_placement_csv_names_are_exact_and_a_bom_is_no_header(tmp_path):
    from pardnn.graph import CostGraph
    from pardnn.hardware import parse_devices
    from pardnn.io.placement import read_csv
    graph = CostGraph.build([" a", "b ", "c"], edge_src=[" a", "b "], edge_dst=["b ", "c"])
    path = tmp_path / "p.csv"
    path.write_text('\ufeffnode,device\n a,1\nb ,0\n c , 1\n', encoding="utf-8")
    assert read_csv(str(path), graph, parse_devices("cpu:2")).tolist() == [1, 0, 1]


def _cluster(tmp_path, hosts, **extra):
    path = tmp_path / "cluster.json"
    path.write_text(json.dumps({"format": "pardnn-cluster", "version": 1, "hosts": hosts, **extra}))
    return path


HOST = {"task": "/job:worker/task:0", "devices": [{"name": "GPU:0", "memory": "1GiB"},
                                                  {"name": "GPU:1", "memory": "1GiB"}]}


@pytest.mark.parametrize("hosts, extra, needle", [
    ([], {}, "lists no devices"),
    ([{"task": "/job:worker/task:0", "devices": []}], {}, "lists no devices"),
    ([HOST], {"links": {"latency_us": [[0, 1], [1, 0]], "bandwidth_bytes_per_us": [[0, 1]]}},
     "malformed cluster file"),
    ([HOST], {"links": {"latency_us": [[0, -1], [1, 0]], "bandwidth_bytes_per_us": [[0, 1], [1, 0]]}},
     "links need bandwidths of 1 B/s to 1 EiB/s"),
    ([HOST], {"links": {"latency_us": [[0, 1], [1, 0]], "bandwidth_bytes_per_us": [[0, 0], [1, 0]]}},
     "links need bandwidths of 1 B/s to 1 EiB/s"),
    ([HOST], {"links": {"latency_us": [[0, "x"], [1, 0]], "bandwidth_bytes_per_us": [[0, 1], [1, 0]]}},
     "malformed cluster file"),
    ([HOST], {"links": {"latency_us": [[0, 1e400], [1, 0]], "bandwidth_bytes_per_us": [[0, 1], [1, 0]]}},
     "links need bandwidths of 1 B/s to 1 EiB/s"),
    ([HOST], {"links": {"latency_us": [[0, 1e308], [1e308, 0]], "bandwidth_bytes_per_us": [[0, 1], [1, 0]]}},
     "latencies of 0 to one day"),
    ([HOST], {"links": {"latency_us": [[0, 1], [1, 0]], "bandwidth_bytes_per_us": [[0, 1e-300], [1, 0]]}},
     "links need bandwidths of 1 B/s to 1 EiB/s"),
    ([HOST], {"intra_host": "fast"}, "malformed cluster file (AttributeError"),
    ([HOST], {"intra_host": {"bandwidth": "0GB/s"}}, "intra_host.bandwidth"),
    ([HOST], {"reserve": 1.5}, "reserve must be in [0, 1)"),
    ([{**HOST, "devices": HOST["devices"] * 2}], {}, "lists a device twice"),
])
def test_bad_cluster_files(chain_json, tmp_path, capsys, hosts, extra, needle):
    path = _cluster(tmp_path, hosts, **extra)
    err = fails(["place", str(chain_json), "--devices", str(path), "-o", str(tmp_path / "out")],
                needle, capsys, tmp_path)
    assert f"--devices: {path}" in err


def test_a_group_pinned_to_two_device_kinds(tmp_path, capsys):
    path = tmp_path / "pinned.json"
    CostGraph.build(names=["a", "b", "c", "d", "e"], comp_us=[1] * 5, group=["g", "g", "c", "d", "e"],
                    pinned=["CPU", "GPU", None, None, None]).to_json(path)
    cluster = _cluster(tmp_path, [{"task": "/job:worker/task:0", "devices": [
        {"name": "CPU:0", "memory": "1GiB"}, {"name": "GPU:0", "memory": "1GiB"}]}])
    for algorithm in ("pardnn", "round-robin", "etf"):
        fails(["place", str(path), "--devices", str(cluster), "--algorithm", algorithm,
               "-o", str(tmp_path / "out")],
              "PROFILE: colocation group of ['a', 'b'] is pinned to CPU and GPU at once", capsys, tmp_path)


@pytest.mark.parametrize("argv, needle", [
    (["--local", "cpu:2", "--sizes", "4KiB"], "--sizes: need at least two different sizes"),
    (["--local", "cpu:2", "--sizes", "1,2"], "--sizes: need at least two different sizes"),
    (["--local", "cpu:2", "--sizes", "4KiB,lots"], "--sizes: cannot read size"),
    (["--local", "cpu:2", "--repeats", "0"], "--repeats: need 1 to 1000"),
    (["--local", "cpu:2", "--repeats", "1000000000"], "--repeats: need 1 to 1000"),
    (["--local", "cpu:2", "--hops", "3"], "--hops: need an even number"),
    (["--local", "cpu:2", "--reserve", "1"], "--reserve: must be in [0, 1)"),
    (["--local", "cpu:2", "--timeout", "2 days"], "--timeout"),
    (["--local", "cpu:2", "--memory", "1e30"], "--memory: size '1e30' is too large"),
    (["--local", "cpu:2", "--out-name"], "unrecognized arguments"),
    (["--cluster", "missing.json"], "--cluster: cluster file missing.json: cannot read"),
    (["--local", "cpu:2", "--workers", "h:1"], "not allowed with argument"),
])
def test_links_flags(tmp_path, capsys, argv, needle, monkeypatch):
    monkeypatch.chdir(tmp_path)
    fails(["links", *argv, "-o", "cluster.json"], needle, capsys, tmp_path)
    assert not (tmp_path / "cluster.json").exists()


@pytest.mark.parametrize("out, needle", [
    ("cluster.txt", "-o: cluster.txt must end in .json"),
    ("no/such/dir/cluster.json", "-o: cannot write no/such/dir/cluster.json"),
    ("folder.json", "-o: folder.json is a folder"),
])
def test_links_output_path_is_checked_before_measuring(tmp_path, capsys, monkeypatch, out, needle):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "folder.json").mkdir()
    fails(["links", "--local", "cpu:2", "-o", out], needle, capsys, tmp_path)


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
@pytest.mark.parametrize("where, column, what", [
    ("nodes", "comp_us", "compute time"), ("nodes", "out_bytes", "output bytes"),
    ("nodes", "persist_bytes", "persistent bytes"), ("nodes", "temp_bytes", "temp bytes"),
    ("edges", "bytes", "edge bytes")])
def test_a_non_finite_cost_is_refused_with_its_message(tmp_path, capsys, where, column, what, value):
    """NaN and infinite costs never enter a graph (a NaN compares false with every limit,
    so only the finiteness check stops it), in the JSON reader's words (which names a
    NaN byte count as not whole) and in CostGraph.build's (the column named)."""
    path = tmp_path / "g.json"
    CostGraph.build(names=["a", "b"], comp_us=[1, 2], out_bytes=[8, 8], edge_src=["a"],
                    edge_dst=["b"], edge_bytes=[8]).to_json(path)
    doc = json.loads(path.read_text())
    doc[where][-1][column] = value
    path.write_text(json.dumps(doc))
    entry = f"{where}[{len(doc[where]) - 1}].{column}"
    message = f"{entry} must be a whole number, not nan" if column != "comp_us" and value != value \
        else f"{what} has a non-finite value"
    err = fails(["place", str(path), "--devices", "cpu:2", "-o", str(tmp_path / "out")],
                message, capsys, tmp_path)
    assert err.endswith(f"{path}: {message}\n")
    columns = {"comp_us": [1, 2], "out_bytes": [8, 8], "persist_bytes": [0, 0], "temp_bytes": [0, 0],
               "edge_bytes": [8]}
    columns["edge_bytes" if column == "bytes" else column][-1] = value
    with pytest.raises(GraphError, match=f"^{what} has a non-finite value$"):
        CostGraph.build(names=["a", "b"], edge_src=["a"], edge_dst=["b"], **columns)

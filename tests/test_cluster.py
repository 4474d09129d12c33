import json

import numpy as np
import pytest

from pardnn.hardware import GiB, parse_devices
from pardnn.hardware.cluster import MAX_DEVICES
from pardnn.base.errors import UserError
from pardnn.graph import CostGraph
from pardnn.base.units import parse_rate, parse_size, parse_time


@pytest.mark.parametrize("text, expected", [
    ("32GiB", 32 * 2**30), ("16GB", 16 * 10**9), ("1024", 1024), ("1.5KiB", 1536),
    ("512 MiB", 512 * 2**20), ("2tb", 2 * 10**12), ("1PB", 10**15), ("3PiB", 3 * 2**50),
    ("1EB", 10**18), ("1EiB", 2**60)])
def test_sizes(text, expected):
    assert parse_size(text) == expected


def test_rates_and_times():
    assert parse_rate("300GB/s") == pytest.approx(300e3)      # bytes per us
    assert parse_rate("200Gb/s") == parse_rate("200Gbit/s") == pytest.approx(25e3)     # bits, as links are quoted
    assert parse_rate("12gb/s") == pytest.approx(12e3)        # all lower case: bytes, as before
    assert parse_rate("8Gib/s") == parse_rate("8Gibit/s") == pytest.approx(2**30 / 1e6)   # binary bits
    assert parse_rate("1GiB/s") == pytest.approx(2**30 / 1e6)
    assert parse_time("25us") == 25 and parse_time("1ms") == 1000
    assert parse_time("0.5s") == 5e5 and parse_time("100ns") == pytest.approx(0.1)


@pytest.mark.parametrize("func, text, flag", [
    (parse_size, "12 parsecs", "--memory"), (parse_size, "lots", "--memory"),
    (parse_rate, "fast", "--bandwidth"), (parse_time, "3 fortnights", "--latency"),
    (parse_size, "16Gb", "--memory: '16Gb' reads as bits; give bytes, e.g. 16GB or 16GiB"),
    (parse_size, "1Mb", "--memory: '1Mb' reads as bits; give bytes, e.g. 1MB or 1MiB")])
def test_bad_units_name_the_flag(func, text, flag):
    with pytest.raises(UserError, match=flag):
        func(text)


@pytest.mark.parametrize("func, text, flag, message", [
    (parse_size, "1e30", "--memory", "too large"), (parse_size, "2EiB", "--memory", "too large"),
    (parse_size, "1e400", "--memory", "too large"),
    (parse_rate, "1e400", "--bandwidth", "out of range"), (parse_rate, "1e-30GB/s", "--bandwidth", "out of range"),
    (parse_rate, "0", "--bandwidth", "out of range"), (parse_rate, "2EiB/s", "--bandwidth", "out of range"),
    (parse_time, "1e300", "--latency", "too long"), (parse_time, "2e400ms", "--latency", "too long")])
def test_absurd_values_are_bad_input(func, text, flag, message):
    with pytest.raises(UserError, match=f"{flag}: .*{message}"):
        func(text)


def test_huge_memory_places(tmp_path, capsys):
    from pardnn.cli import main
    path = tmp_path / "g.json"
    CostGraph.build(names=["a", "b"], comp_us=[1, 1], out_bytes=[8, 8], edge_src=["a"],
                    edge_dst=["b"], edge_bytes=[8]).to_json(path)
    for memory in ("1PB", "2PiB", "1EB", "1EiB"):
        assert main(["place", str(path), "--devices", "cpu:2", "--memory", memory,
                     "-o", str(tmp_path / memory)]) == 0
    capsys.readouterr()
    assert main(["place", str(path), "--devices", "cpu:2", "--memory", "1e30", "-o", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--memory" in err and not (tmp_path / "x").exists()


def test_presets():
    c = parse_devices("dgx1-v100")
    assert c.num_devices == 8 and c.memory[0] == 32 * GiB
    assert c.bandwidth[0, 3] == pytest.approx(50e3)            # two NVLinks
    assert c.bandwidth[0, 1] == pytest.approx(25e3)            # one NVLink
    assert c.bandwidth[0, 7] == pytest.approx(10e3)            # PCIe + QPI
    assert np.allclose(c.bandwidth, c.bandwidth.T)
    assert parse_devices("dgx2").num_devices == 16
    assert parse_devices("dgx-h100").memory[0] == 80 * GiB
    assert parse_devices("dgx-a100:4").num_devices == 4
    cpu = parse_devices("cpu:4")
    assert cpu.names[3] == "/job:localhost/replica:0/task:0/device:CPU:3"
    assert parse_devices("3").devices[0].kind == "GPU"


def test_a_new_preset_needs_only_its_entry(monkeypatch):
    """docs/architecture.md "Add a machine or a device kind": one PRESETS entry, and
    `--devices` accepts it and names it among its choices."""
    from pardnn.hardware import presets

    monkeypatch.setitem(presets.PRESETS, "dgx-test", presets.Preset(
        2, lambda k: presets.PRESETS["dgx-h100"].build(k), presets.PRESETS["dgx-h100"].gpu))
    assert "dgx-test" in presets.preset_names() and parse_devices("dgx-test").num_devices == 2
    with pytest.raises(UserError, match="dgx-test"):
        parse_devices("dgx-nope")
    names = presets.preset_names()
    assert names[:2] == ["cpu:K", "gpu:K"] and names[-3:] == ["PRESET+host", "NxPRESET", "cluster.json"]
    assert len(names) == len(presets.PRESETS) + 3


def test_capacity_reserve_and_links():
    c = parse_devices("gpu:2").with_options(memory=1000, reserve=0.1, bandwidth=1e3, latency=5)
    assert c.capacity.tolist() == [900, 900]
    assert c.comm_us(0, 1, 2000) == pytest.approx(7.0)
    assert c.comm_us(1, 1, 2000) == 0
    assert c.device_index("GPU:1") == 1


@pytest.mark.parametrize("spec", ["dgx9", "cpu", "dgx1-v100:9", "cpu:0", "gpu:x"])
def test_bad_presets(spec):
    with pytest.raises(UserError, match="--devices"):
        parse_devices(spec)


def test_hosts_composed_twice_are_refused():
    with pytest.raises(UserError, match="--devices: '2x2xdgx-h100' composes hosts twice"):
        parse_devices("2x2xdgx-h100")


def test_bad_reserve():
    with pytest.raises(UserError, match="--reserve"):
        parse_devices("gpu:2").with_options(reserve=1.5)


def test_composed_hosts_get_a_hierarchical_link_matrix():
    c = parse_devices("2xdgx-h100")
    assert c.num_devices == 16 and len(c.hosts) == 2
    assert c.names[8] == "/job:worker/task:1/device:GPU:0"
    assert c.host_of.tolist() == [0] * 8 + [1] * 8
    assert c.bandwidth[0, 1] == pytest.approx(450e3)          # NVLink inside a host
    assert c.bandwidth[0, 8] == pytest.approx(25e3)           # InfiniBand between hosts
    assert c.latency_us[3, 12] == c.latency_us[12, 3] > c.latency_us[3, 4]


def test_cluster_file_round_trip(tmp_path):
    from pardnn.hardware import cluster_file
    c = parse_devices("2xdgx1-v100:2").with_options(reserve=0.2)
    path = tmp_path / "cluster.json"
    cluster_file.save(c, str(path))
    d = parse_devices(str(path))
    assert d.names == c.names and d.reserve == 0.2
    assert np.array_equal(d.bandwidth, c.bandwidth) and np.array_equal(d.latency_us, c.latency_us)
    assert d.memory.tolist() == c.memory.tolist()


def test_a_cluster_files_reserve_holds_unless_the_flag_is_given(tmp_path, capsys):
    from pardnn.hardware import cluster_file
    from pardnn.cli import main
    from pardnn.graph import RESIDUAL
    path = tmp_path / "cluster.json"
    cluster_file.save(parse_devices("gpu:1").with_options(memory=1_000_000, reserve=0.5), str(path))
    graph = tmp_path / "g.json"
    CostGraph.build(["w"], persist_bytes=[700_000], kind=[RESIDUAL]).to_json(str(graph))
    assert main(["place", str(graph), "--devices", str(path), "-o", str(tmp_path / "a")]) == 2
    err = capsys.readouterr().err     # 700 kB > half of 1 MB: refused before placing (least_memory)
    assert "488.28 KiB usable per device (memory minus the 50% reserve) is too little for any placement" in err
    assert main(["place", str(graph), "--devices", str(path), "--reserve", "0.1", "-o", str(tmp_path / "b")]) == 0


def test_cluster_file_with_intra_and_inter_links(tmp_path):
    import json
    path = tmp_path / "c.json"
    path.write_text(json.dumps({
        "format": "pardnn-cluster", "version": 1,
        "hosts": [{"task": "/job:worker/task:0", "address": "127.0.0.1:2222",
                   "devices": [{"name": "CPU:0", "memory": "1GiB"}, {"name": "CPU:1", "memory": "1GiB"}]},
                  {"task": "/job:worker/task:1", "address": "127.0.0.1:2223",
                   "devices": [{"name": "CPU:0", "memory": "2GiB"}]}],
        "intra_host": {"latency": "5us", "bandwidth": "10GB/s"},
        "inter_host": {"latency": "50us", "bandwidth": "1GB/s"}}))
    c = parse_devices(str(path))
    assert c.names[2] == "/job:worker/task:1/device:CPU:0" and c.memory[2] == 2 * GiB
    assert c.comm_us(0, 1, 10_000) == pytest.approx(5 + 1)
    assert c.comm_us(1, 2, 10_000) == pytest.approx(50 + 10)
    assert c.hosts[1].address == "127.0.0.1:2223"


def test_bad_cluster_files_name_the_file(tmp_path):
    path = tmp_path / "c.json"
    path.write_text("{}")
    with pytest.raises(UserError, match="c.json is not a pardnn cluster file"):
        parse_devices(str(path))
    path.write_text('{"format": "pardnn-cluster", "version": 1, "hosts": [{"task": "/job:w/task:0"}]}')
    with pytest.raises(UserError, match="c.json: malformed"):
        parse_devices(str(path))
    with pytest.raises(UserError, match="cannot read"):
        parse_devices(str(tmp_path / "none.json"))


def _cluster_file(path, devices_per_host, hosts=1, **extra):
    doc = {"format": "pardnn-cluster", "version": 1, "hosts": [
        {"task": f"/job:worker/task:{h}",
         "devices": [{"name": f"GPU:{i}", "memory": "1GiB"} for i in range(devices_per_host)]}
        for h in range(hosts)], **extra}
    path.write_text(json.dumps(doc))
    return str(path)


@pytest.mark.parametrize("spec, count", [
    ("cpu:1000000", 1000000), ("gpu:1025", 1025), ("1000000", 1000000),
    ("1000000xcpu:1", 1000000), ("2xcpu:600", 1200), ("129xdgx-h100", 1032),
    ("99999999999999999999xdgx2", 16 * 99999999999999999999)])
def test_more_than_max_devices_is_bad_input(spec, count):
    with pytest.raises(UserError, match=f"--devices: '{spec}' asks for {count} devices; "
                                        f"pardnn places on at most {MAX_DEVICES}"):
        parse_devices(spec)


def test_max_devices_is_allowed_for_every_form(tmp_path):
    assert MAX_DEVICES == 1024                      # docs/clusters.md names this number
    assert parse_devices("cpu:1024").num_devices == 1024
    assert parse_devices("128xdgx-h100").num_devices == 1024
    assert parse_devices(_cluster_file(tmp_path / "c.json", 512, hosts=2)).num_devices == 1024


def test_cluster_file_with_too_many_devices_is_bad_input(tmp_path):
    path = _cluster_file(tmp_path / "big.json", 1025)
    with pytest.raises(UserError, match=f"asks for 1025 devices; pardnn places on at most {MAX_DEVICES}"):
        parse_devices(path)


def test_too_many_devices_exits_2_from_the_cli(tmp_path, capsys):
    from pardnn.cli import main
    path = tmp_path / "g.json"
    CostGraph.build(names=["a"]).to_json(path)
    assert main(["place", str(path), "--devices", "cpu:1000000", "-o", str(tmp_path / "o")]) == 2
    assert capsys.readouterr().err == ("pardnn place: error: --devices: 'cpu:1000000' asks for 1000000 "
                                       "devices; pardnn places on at most 1024\n")
    assert not (tmp_path / "o").exists()

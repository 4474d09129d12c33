import numpy as np
import pytest

from pardnn.cluster import GiB, parse_devices
from pardnn.errors import UserError
from pardnn.units import parse_rate, parse_size, parse_time


@pytest.mark.parametrize("text, expected", [
    ("32GiB", 32 * 2**30), ("16GB", 16 * 10**9), ("1024", 1024), ("1.5KiB", 1536),
    ("512 MiB", 512 * 2**20), ("2tb", 2 * 10**12)])
def test_sizes(text, expected):
    assert parse_size(text) == expected


def test_rates_and_times():
    assert parse_rate("300GB/s") == pytest.approx(300e3)      # bytes per us
    assert parse_rate("1GiB/s") == pytest.approx(2**30 / 1e6)
    assert parse_time("25us") == 25 and parse_time("1ms") == 1000
    assert parse_time("0.5s") == 5e5 and parse_time("100ns") == pytest.approx(0.1)


@pytest.mark.parametrize("func, text, flag", [
    (parse_size, "12 parsecs", "--memory"), (parse_size, "lots", "--memory"),
    (parse_rate, "fast", "--bandwidth"), (parse_time, "3 fortnights", "--latency")])
def test_bad_units_name_the_flag(func, text, flag):
    with pytest.raises(UserError, match=flag):
        func(text)


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


def test_bad_reserve():
    with pytest.raises(UserError, match="--reserve"):
        parse_devices("gpu:2").with_options(reserve=1.5)

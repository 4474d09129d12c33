"""GPU presets for `--estimate` (no TensorFlow needed)."""

import pytest

from pardnn.hardware import gpu_specs
from pardnn.hardware.presets import PRESETS, estimate_gpu, gpu_preset_names
from pardnn.hardware import parse_devices
from pardnn.base.errors import UserError


@pytest.mark.parametrize("preset, tflops", [
    ("gpu", 14.1), ("dgx1-v100", 15.7), ("dgx2", 15.7), ("dgx-a100", 19.5), ("dgx-h100", 66.9)])
def test_peak_fp32_matches_datasheets(preset, tflops):
    _, spec = estimate_gpu(preset)
    assert spec.peak_fp32_gflops / 1e3 == pytest.approx(tflops, abs=0.05)


def test_grappler_sees_the_datasheet_peak():
    """Grappler assumes 64 FP32 lanes per SM; Hopper has 128, so it gets twice the SMs."""
    for spec in {p.gpu for p in PRESETS.values() if p.gpu is not None}:
        props = spec.device_properties()
        grappler_gflops = props["num_cores"] * props["frequency"] * 1e-3 * 64 * 2
        assert grappler_gflops == pytest.approx(spec.peak_fp32_gflops)
    assert gpu_specs.H100_SXM5.grappler_cores == 264
    assert gpu_specs.V100_SXM2.grappler_cores == 80


def test_bandwidth_in_grappler_units():
    # DeviceProperties.bandwidth is KB/s; Grappler reads bandwidth / 1e6 as GB/s
    props = gpu_specs.A100_SXM4.device_properties()
    assert props["bandwidth"] / 1e6 == 1555.0
    assert props["environment"] == {"architecture": "8.0"}


@pytest.mark.parametrize("preset", ["gpu:4", "dgx1-v100", "dgx2", "dgx-a100", "dgx-h100"])
def test_memory_matches_the_cluster_preset(preset):
    _, spec = estimate_gpu(preset)
    assert spec.memory_bytes == parse_devices(preset).devices[0].memory


@pytest.mark.parametrize("text, name", [
    ("dgx-h100", "dgx-h100"), ("DGX-A100:4", "dgx-a100"), ("gpu:8", "gpu"), ("gpu", "gpu"), ("2", "gpu")])
def test_resolve_accepts_device_spellings(text, name):
    assert estimate_gpu(text)[0] == name


@pytest.mark.parametrize("text", ["cpu:2", "tpu-v4", "dgx-h100:x", ""])
def test_unknown_preset_lists_the_choices(text):
    with pytest.raises(UserError) as err:
        estimate_gpu(text)
    message = str(err.value)
    assert message.startswith("--estimate: unknown GPU preset")
    for name in gpu_preset_names():
        assert name in message


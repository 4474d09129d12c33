"""Device properties of the GPUs behind each preset, for analytical cost estimates.

`pardnn profile MODEL --estimate PRESET` describes one GPU of the preset to
TensorFlow's Grappler cost model (pardnn.tf.estimate). That model costs an op as
compute time + memory time: FLOPs / peak FP32 rate plus bytes read and written /
memory bandwidth (op_level_cost_estimator.cc, `PredictOpCountBasedCost`). It
derives the peak FP32 rate from the device description as

    SMs x clock x FP32 lanes per SM x 2 (one FMA = 2 FLOPs)

with the lanes per SM fixed by compute capability: 64 for 6.x and later. That is
right for Volta and A100 but half the truth for Hopper (128 FP32 lanes per SM), so
`grappler_cores` hands Grappler SMs x lanes / 64 "SMs" and the resulting peak equals
the datasheet's.

Two things Grappler leaves out are added by pardnn.tf.estimate from the figures here:
- a fixed cost per op (`op_overhead_us`: CUDA kernel launch plus TensorFlow's
  executor dispatch), added once to every op's time;
- tensor cores: `tensor_peaks_gflops` gives the datasheet's dense MatMul/convolution
  rate per precision (`fp16` = FP16/BF16 mixed precision, `tf32` = TensorFloat-32).
  The compute term of MatMul and convolution ops is scaled from the FP32 peak to the
  chosen precision's. The default precision is what TensorFlow does unasked:
  TF32 on Ampere and later (compute capability >= 8.0), FP32 on Volta.

The specs (SMs, clock, lanes, memory, bandwidth, L2) are tabled with their sources in
docs/estimates.md and in each spec's `source`. The one table of presets
(pardnn.hardware.presets) names each preset's GPU here and takes its memory from it,
so an estimated profile and `--devices PRESET` describe the same machine. No TensorFlow import here.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass

from pardnn.base.errors import UserError

MIN_CONV_EFFICIENCY = 0.01   # below it a convolution's time means nothing (and overflows at 1e-300)

GiB = 2**30
MiB = 2**20
GRAPPLER_LANES_PER_SM = 64   # what Grappler assumes for compute capability >= 6


@dataclass(frozen=True)
class GpuSpec:
    """One GPU model: the figures a roofline cost model needs, and their source."""

    name: str
    architecture: str        # CUDA compute capability, e.g. "7.0"
    sm_count: int
    fp32_lanes_per_sm: int
    clock_mhz: int           # boost clock
    memory_bytes: int
    bandwidth_gbs: float     # memory bandwidth, GB/s (1e9 bytes per second)
    l2_bytes: int
    source: str
    op_overhead_us: float = 0.0          # fixed cost per op: kernel launch + executor dispatch
    tensor_peaks_gflops: tuple = ()      # (precision, dense GFLOP/s) of the tensor cores

    @property
    def precisions(self) -> list:
        """The precisions MatMul/convolution can be costed at on this GPU."""
        return ["fp32"] + [name for name, _ in self.tensor_peaks_gflops]

    @property
    def default_precision(self) -> str:
        """What TensorFlow uses unasked: TF32 where the GPU has it (Ampere and later), else FP32."""
        return "tf32" if "tf32" in self.precisions else "fp32"

    def matmul_peak_gflops(self, precision: str) -> float:
        """Dense MatMul/convolution rate at `precision` (one of `precisions`)."""
        return dict(self.tensor_peaks_gflops, fp32=self.peak_fp32_gflops)[precision]

    @property
    def peak_fp32_gflops(self) -> float:
        return self.sm_count * self.fp32_lanes_per_sm * 2 * self.clock_mhz / 1e3

    @property
    def grappler_cores(self) -> int:
        """The SM count to give Grappler so that its peak equals this GPU's (see module doc)."""
        return self.sm_count * self.fp32_lanes_per_sm // GRAPPLER_LANES_PER_SM

    def device_properties(self) -> dict:
        """Keyword arguments for TensorFlow's `DeviceProperties` proto.

        Units are the proto's: frequency in MHz, bandwidth in KB/s (Grappler reads
        `bandwidth / 1e6` as GB/s), sizes in bytes."""
        return {
            "type": "GPU", "vendor": "NVIDIA", "model": self.name,
            "frequency": self.clock_mhz, "num_cores": self.grappler_cores,
            "memory_size": self.memory_bytes, "bandwidth": int(self.bandwidth_gbs * 1e6),
            "l2_cache_size": self.l2_bytes,
            "environment": {"architecture": self.architecture},
        }

    def to_dict(self) -> dict:
        """The figures as recorded in profile.json."""
        return {"name": self.name, "compute_capability": self.architecture, "sm_count": self.sm_count,
                "fp32_lanes_per_sm": self.fp32_lanes_per_sm, "clock_mhz": self.clock_mhz,
                "peak_fp32_gflops": round(self.peak_fp32_gflops, 1), "memory_bytes": self.memory_bytes,
                "bandwidth_gbs": self.bandwidth_gbs, "l2_bytes": self.l2_bytes,
                "tensor_peaks_gflops": dict(self.tensor_peaks_gflops),
                "default_op_overhead_us": self.op_overhead_us, "source": self.source}


_V100_WP = "NVIDIA Tesla V100 GPU Architecture white paper WP-08608-001 v1.1, Table 1"
# Per-op overhead (docs/estimates.md gives the measurements it rests on): a CUDA kernel
# launch costs 3-5 us and TensorFlow's executor adds a few us of host work per op; the
# hosts of newer DGX machines have faster CPUs and newer drivers, hence the lower figures.
_V100_OVERHEAD_US, _A100_OVERHEAD_US, _H100_OVERHEAD_US = 8.0, 6.0, 5.0
V100_PCIE = GpuSpec("Tesla V100-PCIe-32GB", "7.0", 80, 64, 1380, 32 * GiB, 900.0, 6 * MiB,
                    "NVIDIA Tesla V100 PCIe product brief PB-08744-001 (1380 MHz boost, 14 TFLOPS FP32, "
                    "112 TFLOPS tensor, 900 GB/s); " + _V100_WP,
                    _V100_OVERHEAD_US, (("fp16", 112_000.0),))
V100_SXM2 = GpuSpec("Tesla V100-SXM2-32GB", "7.0", 80, 64, 1530, 32 * GiB, 900.0, 6 * MiB,
                    _V100_WP + " (125 TFLOPS tensor)", _V100_OVERHEAD_US, (("fp16", 125_000.0),))
V100_SXM3 = GpuSpec("Tesla V100-SXM3-32GB", "7.0", 80, 64, 1530, 32 * GiB, 900.0, 6 * MiB,
                    "NVIDIA DGX-2 datasheet (16 GPUs, 2 PFLOPS tensor = the V100-SXM2 per-GPU peak, "
                    "hence SXM2 clock, bandwidth and 125 TFLOPS tensor); " + _V100_WP,
                    _V100_OVERHEAD_US, (("fp16", 125_000.0),))
A100_SXM4 = GpuSpec("A100-SXM4-40GB", "8.0", 108, 64, 1410, 40 * GiB, 1555.0, 40 * MiB,
                    "NVIDIA A100 Tensor Core GPU Architecture white paper (108 SMs, 64 FP32 cores/SM, "
                    "1410 MHz boost, 19.5 TFLOPS FP32, 156 TFLOPS TF32, 312 TFLOPS FP16/BF16 dense, "
                    "1555 GB/s HBM2, 40 MB L2)",
                    _A100_OVERHEAD_US, (("tf32", 156_000.0), ("fp16", 312_000.0)))
H100_SXM5 = GpuSpec("H100-SXM5-80GB", "9.0", 132, 128, 1980, 80 * GiB, 3350.0, 50 * MiB,
                    "NVIDIA H100 Tensor Core GPU Architecture white paper (132 SMs, 128 FP32 cores/SM, "
                    "50 MB L2) and H100 datasheet (SXM5: 67 TFLOPS FP32, 495 TFLOPS TF32 and 989 TFLOPS "
                    "FP16/BF16 dense, i.e. half the with-sparsity figures, 3.35 TB/s HBM3, 80 GB)",
                    _H100_OVERHEAD_US, (("tf32", 494_700.0), ("fp16", 989_400.0)))

PRECISIONS = ("fp32", "tf32", "fp16")


def check_precision(spec: GpuSpec, label: str, precision: str | None) -> str:
    """The precision to cost MatMul/convolution at: `precision`, or the GPU's default.

    UserError naming the valid choices for an unknown precision or one the GPU lacks."""
    if precision is None:
        return spec.default_precision
    text = str(precision).strip().lower()
    if text not in PRECISIONS:
        raise UserError(f"--precision: unknown precision {precision!r} (choose from {', '.join(PRECISIONS)})")
    if text not in spec.precisions:
        raise UserError(f"--precision: {label} ({spec.name}) has no {text} tensor cores "
                        f"(choose from {', '.join(spec.precisions)})")
    return text


def check_conv_efficiency(share, name: str, shown: str | None = None) -> float:
    """`share` as a float in [MIN_CONV_EFFICIENCY, 1] (None: 1.0); a UserError naming
    `name` and showing `shown` (else repr(share)) otherwise: a string, a bool, NaN, or
    a rate so low that op times overflow."""
    if share is None:
        return 1.0
    ok = isinstance(share, numbers.Real) and not isinstance(share, bool) and MIN_CONV_EFFICIENCY <= share <= 1
    if not ok:
        raise UserError(f"{name}: cannot use {shown if shown is not None else repr(share)} (give a share "
                        f"of the peak rate from {MIN_CONV_EFFICIENCY:g} to 1, e.g. 0.34)")
    return float(share)

"""The hosts behind the presets: the CPUs and system memory that `--devices PRESET+host`
adds to a preset's GPUs as one more device, `/device:CPU:0` (docs/clusters.md, "The
host as a device").

A host is described by the figures that set how fast it runs ops relative to the
preset's GPU, and how fast tensors reach it:

- `peak_fp32_gflops`: sockets x cores x base clock x FP32 FLOPs per cycle per core
  (AVX-512 with two FMA units: 2 x 16 lanes x 2 = 64; AVX2 with two: 32). Compute-bound
  ops (pardnn.graph.op_rates) run at this over the GPU's MatMul rate at its default
  precision, the rate `--estimate PRESET` costs them at.
- `bandwidth_gbs`: sockets x memory channels x the DIMMs' transfer rate x 8 bytes.
  Every other op (element-wise, reductions, optimizer updates: memory-bound on both)
  runs at this over the GPU's memory bandwidth.
- the link to each GPU: PCIe x16 of the GPU's generation at its effective rate for
  large pinned copies (Gen3 12 GB/s, Gen4 24 GB/s, Gen5 48 GB/s, about 3/4 of the raw
  15.75, 31.5 and 63 GB/s), and the per-copy overhead of a CUDA memcpy.

These are datasheet figures, not measurements; each spec's `source` names them. The
rates leave out what a datasheet cannot give (a CPU reaches its peak only in
well-blocked kernels, TensorFlow's CPU kernels use fewer threads for small tensors),
so a host is if anything faster here than in life.
"""

from __future__ import annotations

from dataclasses import dataclass

GiB = 2**30
TiB = 2**40


@dataclass(frozen=True)
class HostSpec:
    """One host: its CPUs and memory, and its link to each GPU."""

    name: str
    memory_bytes: int
    peak_fp32_gflops: float
    bandwidth_gbs: float        # memory bandwidth, GB/s
    link_gbs: float             # to and from each GPU, per direction
    link_latency_us: float
    source: str

    def rates(self, gpu) -> tuple:
        """(compute rate, memory rate) relative to `gpu` (a GpuSpec): MatMul-class ops
        against its MatMul rate at its default precision, the rest against its memory
        bandwidth."""
        return (self.peak_fp32_gflops / gpu.matmul_peak_gflops(gpu.default_precision),
                self.bandwidth_gbs / gpu.bandwidth_gbs)


_PCIE3, _PCIE4, _PCIE5 = 12.0, 24.0, 48.0
_COPY_US = 10.0      # cudaMemcpyAsync launch and completion, per copy

XEON_E5_2698V4 = HostSpec(
    "2 x Intel Xeon E5-2698 v4, 512 GiB DDR4-2133", 512 * GiB, 2 * 20 * 2.2 * 32, 2 * 4 * 2.133 * 8,
    _PCIE3, _COPY_US,
    "NVIDIA DGX-1 datasheet (2 x Xeon E5-2698 v4 20-core 2.2 GHz, 512 GB DDR4 LRDIMM, PCIe 3.0); "
    "Intel ARK E5-2698 v4 (AVX2, two FMA units: 32 FP32 FLOPs per cycle; 4 channels DDR4-2133)")
XEON_8168 = HostSpec(
    "2 x Intel Xeon Platinum 8168, 1.5 TiB DDR4-2666", 1536 * GiB, 2 * 24 * 2.7 * 64, 2 * 6 * 2.666 * 8,
    _PCIE3, _COPY_US,
    "NVIDIA DGX-2 datasheet (2 x Xeon Platinum 8168 24-core 2.7 GHz, 1.5 TB, PCIe 3.0 switches); "
    "Intel ARK Platinum 8168 (AVX-512, two FMA units: 64 FP32 FLOPs per cycle; 6 channels DDR4-2666)")
EPYC_7742 = HostSpec(
    "2 x AMD EPYC 7742, 1 TiB DDR4-3200", 1 * TiB, 2 * 64 * 2.25 * 32, 2 * 8 * 3.2 * 8,
    _PCIE4, _COPY_US,
    "NVIDIA DGX A100 datasheet (DGX A100 320GB: 2 x AMD EPYC 7742 64-core 2.25 GHz, 1 TB, PCIe 4.0); "
    "AMD EPYC 7742 product page (AVX2, two 256-bit FMA pipes: 32 FP32 FLOPs per cycle; 8 channels "
    "DDR4-3200)")
XEON_8480C = HostSpec(
    "2 x Intel Xeon Platinum 8480C, 2 TiB DDR5-4800", 2 * TiB, 2 * 56 * 2.0 * 64, 2 * 8 * 4.8 * 8,
    _PCIE5, _COPY_US,
    "NVIDIA DGX H100 user guide and datasheet (2 x Xeon Platinum 8480C 56-core 2.0 GHz, 2 TB, "
    "PCIe 5.0); Intel ARK Platinum 8480+ (AVX-512, two FMA units: 64 FP32 FLOPs per cycle; 8 channels "
    "DDR5-4800)")
XEON_6248 = HostSpec(
    "2 x Intel Xeon Gold 6248, 384 GiB DDR4-2933", 384 * GiB, 2 * 20 * 2.5 * 64, 2 * 6 * 2.933 * 8,
    _PCIE4, 15.0,
    "a typical dual-socket PCIe GPU server (give --host-memory for yours): Intel ARK Xeon Gold 6248 "
    "(20-core 2.5 GHz, AVX-512 with two FMA units: 64 FP32 FLOPs per cycle; 6 channels DDR4-2933), "
    "12 x 32 GiB DIMMs; its GPU link is the gpu:K preset's PCIe figure (24 GB/s, 15 us)")

"""How long an op takes on a device of another speed (docs/clusters.md, "Devices of
different speeds").

A graph's `comp_us` are the times of one device: the one it was profiled on, or the GPU
an estimate costed it for. A cluster may hold devices of other speeds (the host's CPUs
beside the GPUs), each with two rates relative to that device (pardnn.hardware.cluster):
a compute rate for the ops whose time is their arithmetic (MatMul, convolutions,
Einsum: `COMPUTE_BOUND`, class 0) and a memory rate for every other op (element-wise
ops, reductions, copies, the optimizer's updates: bound by memory bandwidth on a GPU
and on a CPU alike, class 1). Op n then takes `comp_us[n] * time_scale[class(n), d]`
on device d. One rate per class is a simplification: it leaves out that an op's fixed
overhead (a kernel launch, TF's dispatch) does not scale with either.

On a cluster whose rates are all 1 (`cluster.uniform`: every cluster without a host),
every function here returns `comp_us` itself, so costs stay bit for bit the profile's.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

COMPUTE, MEMORY = 0, 1      # the classes: rows of Cluster.rates and Cluster.time_scale
COMPUTE_BOUND = frozenset([
    "MatMul", "BatchMatMul", "BatchMatMulV2", "BatchMatMulV3", "_FusedMatMul", "SparseMatMul",
    "Einsum", "XlaEinsum",
    "Conv2D", "Conv2DBackpropInput", "Conv2DBackpropFilter", "_FusedConv2D", "FusedConv2DBiasActivation",
    "Conv3D", "Conv3DBackpropInput", "Conv3DBackpropInputV2", "Conv3DBackpropFilter", "Conv3DBackpropFilterV2",
    "DepthwiseConv2dNative", "DepthwiseConv2dNativeBackpropInput", "DepthwiseConv2dNativeBackpropFilter",
])


def rate_classes(ops) -> np.ndarray:
    """int64 per op type in `ops`: COMPUTE for the types in COMPUTE_BOUND, else MEMORY."""
    return np.fromiter((COMPUTE if op in COMPUTE_BOUND else MEMORY for op in ops), np.int64, len(ops))


def node_times(graph, cluster, device) -> np.ndarray:
    """Each node's compute time on its device under placement `device` (int per node)."""
    if cluster.uniform:
        return graph.comp_us
    return graph.comp_us * cluster.time_scale[graph.rate_class, np.asarray(device, np.int64)]


def time_matrix(graph, cluster) -> np.ndarray:
    """(nodes x devices) float: each node's compute time on each device."""
    if cluster.uniform:
        return np.broadcast_to(np.asarray(graph.comp_us, np.float64)[:, None], (graph.num_nodes, cluster.num_devices))
    return graph.comp_us[:, None] * cluster.time_scale[graph.rate_class]


def fastest_times(graph, cluster) -> np.ndarray:
    """Each node's compute time on the device that runs it fastest: a floor whatever
    the placement, for lower bounds."""
    if cluster.uniform:
        return graph.comp_us
    return graph.comp_us * cluster.time_scale.min(axis=1)[graph.rate_class]


def at_rates(graph, compute_rate: float, memory_rate: float):
    """`graph` with the compute times of a device of these rates: what a placer that
    costs every device alike is given for the fastest devices (pardnn.placers.registry).
    The graph itself when both rates are 1."""
    if compute_rate == 1.0 and memory_rate == 1.0:
        return graph
    scale = np.array([1.0 / compute_rate, 1.0 / memory_rate])
    return replace(graph, comp_us=graph.comp_us * scale[graph.rate_class])

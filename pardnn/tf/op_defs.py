"""The OpDefs and kernel devices of a graph's ops, recorded beside its profile.

The loader needs three facts TensorFlow's registries hold: each op's OpDef (to derive
its outputs' dtypes, pardnn.tf.graphdef), which ops have kernels but none for GPU
(pinned to CPU, pardnn.tf.profile_loader), and which have kernels but none for CPU
(pinned to GPU: on a cluster with the host as a device they never go to the host).
`pardnn profile` already runs TensorFlow, so it records them in the profile dir:
`op_defs.pb` (an OpList of every op type graph.pb uses) and, in profile.json,
`cpu_only_ops` (sorted op names; null when the profiling TensorFlow build registers no
GPU kernels, so nothing can be known) and `gpu_only_ops` (sorted op names; null
likewise). Placing then reads them without importing TensorFlow. A profile without
`cpu_only_ops` (written before pardnn 0.3) is read with the running TensorFlow's
registries instead; one with it but without `gpu_only_ops` (before the host became a
device) pins nothing to GPU.
"""

from __future__ import annotations

import os

from google.protobuf.message import DecodeError

from pardnn.base.errors import UserError
from pardnn.tf.protos import OpList

OP_DEFS_FILE = "op_defs.pb"


class OpDefs:
    """{op name: OpDef} and the sets of CPU-only and GPU-only ops (None: unknown) of one graph."""

    def __init__(self, defs: dict, cpu_only, gpu_only=None):
        self.defs = defs
        self.cpu_only = cpu_only
        self.gpu_only = gpu_only

    def get(self, op):
        return self.defs.get(op)


def record(op_types) -> tuple:
    """(OpList bytes, cpu_only_ops list or None) for `op_types`, from the running
    TensorFlow; what write_profile_dir stores."""
    import pardnn.tf.quiet_import  # noqa: F401
    from tensorflow.python.framework import op_def_registry
    ops = OpList()
    for op in sorted(set(op_types)):
        op_def = op_def_registry.get(op)
        if op_def is not None:
            ops.op.add().ParseFromString(op_def.SerializeToString())
    return ops.SerializeToString(), _cpu_only_from_registry(op_types)


def load(profile_dir, meta, op_types) -> OpDefs:
    """The OpDefs of `op_types` for the profile in `profile_dir` (profile.json: `meta`)."""
    path = os.path.join(str(profile_dir), OP_DEFS_FILE)
    if not os.path.exists(path) or meta is None or "cpu_only_ops" not in meta:
        return from_tensorflow(op_types)
    ops = OpList()
    try:
        with open(path, "rb") as f:
            ops.ParseFromString(f.read())
    except (OSError, DecodeError, RuntimeError, ValueError):
        raise UserError(f"{path}: not a serialized OpList (truncated or another format)") from None
    cpu_only, gpu_only = meta["cpu_only_ops"], meta.get("gpu_only_ops")
    return OpDefs({d.name: d for d in ops.op}, None if cpu_only is None else set(cpu_only),
                  None if gpu_only is None else set(gpu_only))


def from_tensorflow(op_types) -> OpDefs:
    """The OpDefs of `op_types` as the running TensorFlow registers them."""
    op_types = list(op_types)
    data, cpu_only = record(op_types)
    gpu_only = gpu_only_ops(op_types)
    return OpDefs({d.name: d for d in OpList.FromString(data).op},
                  None if cpu_only is None else set(cpu_only), None if gpu_only is None else set(gpu_only))


def gpu_only_ops(op_types):
    """Sorted ops of `op_types` with kernels but none for CPU or DEFAULT (e.g. CudnnRNN,
    NcclAllReduce); None on a build without GPU kernels, where an op with no CPU
    kernel has none at all and nothing can be known."""
    import pardnn.tf.quiet_import  # noqa: F401
    from tensorflow.python.framework import kernels

    def devices(op):
        return {k.device_type for k in kernels.get_registered_kernels_for_op(op).kernel}
    if "GPU" not in devices("MatMul"):
        return None
    return sorted(op for op in set(op_types) if devices(op) and not devices(op) & {"CPU", "DEFAULT"})


def _cpu_only_from_registry(op_types):
    """Ops with kernels but none for GPU or DEFAULT; None on a build without GPU kernels."""
    from tensorflow.python.framework import kernels

    def devices(op):
        return {k.device_type for k in kernels.get_registered_kernels_for_op(op).kernel}
    if "GPU" not in devices("MatMul"):
        return None
    return sorted(op for op in set(op_types) if devices(op) and not devices(op) & {"GPU", "DEFAULT"})

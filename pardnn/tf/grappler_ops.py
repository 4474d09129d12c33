"""The op types Grappler's analytical cost model knows, and the fallback for the rest.

Grappler's OpLevelCostEstimator (tensorflow/core/grappler/costs/
op_level_cost_estimator.cc, TF 2.21) has a cost function for the op types listed
below: FLOP counts for MatMul/convolution/pooling/batch-norm, element counts for
element-wise ops, bytes moved for data-movement ops, a nominal 1 ns for metadata
ops. Any other op type gets `PredictCostOfAnUnknownOp`: zero FLOPs and the bytes of
its statically shaped inputs and outputs over memory bandwidth, flagged inaccurate.
TensorFlow exposes no way to ask which ops it modelled, so the list is mirrored here;
an op missing from it is merely re-costed by the fallback below, never dropped.

Fallback (used for those ops and for ops of the step Grappler did not schedule at
all): time = bytes touched / memory bandwidth, with bytes touched = input bytes +
output bytes. It is Grappler's own unknown-op rule with two corrections that serve
the objective:
- an in-place dense update (`ResourceApply*`: the optimizer step) reads and writes
  its variables, which Grappler sees only as scalar resource handles, so each
  resource input counts twice the variable's bytes. Other resource inputs
  (ResourceGather and the like touch a few rows) count zero;
- 3-D convolutions (Conv3D and its two gradients; the E3D family is made of them)
  have no Grappler model although their FLOPs dominate, so they add FLOPs / the
  convolution rate (the chosen precision's peak times `--conv-efficiency`), the compute
  term Conv2D gets (compute and memory time added, no overlap, as Grappler does by default).
"""

MODELLED = frozenset("""
Conv2D Conv2DBackpropFilter Conv2DBackpropInput FusedConv2DBiasActivation
DepthwiseConv2dNative DepthwiseConv2dNativeBackpropFilter DepthwiseConv2dNativeBackpropInput
MatMul SparseMatMul SparseTensorDenseMatMul BatchMatMul BatchMatMulV2 QuantizedMatMul
QuantizedMatMulV2 XlaEinsum Einsum NoOp GuaranteeConst Gather GatherNd GatherV2
ScatterAdd ScatterDiv ScatterMax ScatterMin ScatterMul ScatterSub ScatterUpdate
Slice StridedSlice Placeholder Identity IdentityN RefIdentity StopGradient PreventGradient
Reshape _Recv _Send Switch Merge Enter Exit NextIteration BitCast
ConcatV2 DataFormatVecPermute DepthToSpace ExpandDims Fill OneHot Pack Range SpaceToDepth
Split Squeeze Transpose Tile Unpack Rank Shape ShapeN Size MaxPool MaxPoolGrad AvgPool
AvgPoolGrad FusedBatchNorm FusedBatchNormGrad Softmax ResizeBilinear CropAndResize
AssignVariableOp AssignAddVariableOp AssignSubVariableOp AddN
Const Variable VariableV2 AutoReloadVariable VarHandleOp _VarHandlesOp ReadVariableOp
_ReadVariablesOp
Acos All ArgMax Asin Atan Atan2 Cast Ceil Cos Dequantize Erf Erfc Exp Expm1 Floor Inv
InvGrad Lgamma Log Log1p Max Min Neg Prod QuantizeAndDequantizeV2 QuantizeAndDequantizeV4
QuantizedSigmoid QuantizeV2 Reciprocal Relu Relu6 Rint Round Rsqrt Sigmoid Sign Sin Sqrt
Square Sum Tan Tanh TopKV2 Add AddV2 ApproximateEqual BiasAdd QuantizedBiasAdd Div Equal
FloorDiv FloorMod Greater GreaterEqual Less LessEqual LogicalAnd LogicalNot LogicalOr
Maximum Minimum Mod Mul NotEqual QuantizedAdd QuantizedMul RealDiv ReluGrad Select
SelectV2 SquaredDifference Sub TruncateDiv TruncateMod Where
""".split())

DENSE_UPDATE_PREFIX = "ResourceApply"
CONV3D_OPS = frozenset(["Conv3D", "Conv3DBackpropInput", "Conv3DBackpropInputV2",
                        "Conv3DBackpropFilter", "Conv3DBackpropFilterV2"])
# Grappler-modelled ops that run on tensor cores at TF32/FP16 (their compute term is
# rescaled to the precision's rate, the convolutions' to `--conv-efficiency` of it);
# 3-D convolutions take the convolution rate in the fallback.
TENSOR_CORE_OPS = frozenset(["MatMul", "BatchMatMul", "BatchMatMulV2",
                             "Conv2D", "Conv2DBackpropInput", "Conv2DBackpropFilter"])


def is_modelled(op: str) -> bool:
    return op in MODELLED


def fallback_ns(input_bytes: int, output_bytes: int, resource_bytes: int, op: str,
                bandwidth_gbs: float, flops: int = 0, conv_gflops: float = float("inf")) -> float:
    """Nanoseconds for an op Grappler does not cost: bytes touched / bandwidth, plus
    flops / the convolution rate (flops are nonzero only for 3-D convolutions).

    `resource_bytes` is the size of the variables behind the op's resource inputs;
    it counts twice (read + write) for dense in-place updates, else not at all."""
    touched = input_bytes + output_bytes
    if op.startswith(DENSE_UPDATE_PREFIX):
        touched += 2 * resource_bytes
    return touched / bandwidth_gbs + flops / conv_gflops     # bytes / (GB/s) = ns, FLOP / GFLOP/s = ns


def conv_flops(forward_output_elements: int, filter_shape) -> int:
    """FLOPs of a 2-D or 3-D convolution or either gradient: one multiply-add (2 FLOPs)
    per element of the forward output per filter tap per input channel (Grappler's
    count for Conv2D)."""
    taps = 1
    for size in filter_shape[:-1]:      # spatial taps x input channels
        taps *= int(size)
    return 2 * forward_output_elements * taps


# Convolutions get a cuDNN workspace while they run. Estimated as the largest operand,
# capped at TF's default cuDNN workspace limit (TF_CUDNN_WORKSPACE_LIMIT_IN_MB, 4096 MB).
WORKSPACE_OPS = frozenset({
    "Conv2D", "Conv2DBackpropInput", "Conv2DBackpropFilter", "Conv3D", "Conv3DBackpropInputV2",
    "Conv3DBackpropFilterV2", "DepthwiseConv2dNative", "DepthwiseConv2dNativeBackpropInput",
    "DepthwiseConv2dNativeBackpropFilter"})
WORKSPACE_LIMIT = 4096 * 2**20

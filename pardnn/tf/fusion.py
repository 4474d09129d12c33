"""The node patterns Grappler fuses into one kernel, found in a GraphDef.

With TF's default session config, Grappler's remapper replaces a pattern such as
MatMul -> BiasAdd -> Relu by one node (`_FusedMatMul`, named after one of the
pattern's nodes) on the device of the pattern's first node, whatever devices the
placement asked for its other nodes. A placement that splits a pattern is
therefore overridden. The loader ties every pattern's nodes into one colocation
group, so no placer splits it (docs/profiles.md "Fusion").

The patterns follow TF 2.x's remapper (grappler/optimizers/remapper.cc); the
oneDNN ones apply on x86 CPUs, where TF enables oneDNN by default. The match is
structural: the remapper's extra conditions (one consumer, data types, formats,
device kind) are not checked, so a tie may keep together nodes TF would not fuse,
never the other way round. The rules, roots last:

  contraction_bias              {MatMul, Conv2D, Conv3D, DepthwiseConv2dNative} -> BiasAdd
                                (or an Add of a contraction and a rank-1 tensor: oneDNN)
  contraction_bias_activation   ... -> {Relu, Relu6, Elu, LeakyRelu, Tanh, Sigmoid}
  contraction_bias_add          ... BiasAdd -> {Add, AddV2, AddN} of two inputs (oneDNN)
  contraction_bias_add_activation   ... -> activation (oneDNN)
  conv_squeeze_bias             {Conv2D, Conv3D} -> Squeeze -> BiasAdd
  conv_batchnorm                Conv2D -> FusedBatchNorm* (inference) [-> activation]
  batchnorm_activation          FusedBatchNorm* [-> Add (side input)] -> activation
  batchnorm_grad                ReluGrad -> FusedBatchNormGrad*
  matmul_bias_gelu              MatMul -> BiasAdd -> the element-wise ops of Gelu (oneDNN)
  swish                         Mul(x, Sigmoid(x)) (oneDNN)
  mish                          Mul(x, Tanh(Softplus(x))) (oneDNN)
  batch_matmul_mul_add          BatchMatMul* -> Mul -> AddV2 (oneDNN)
  pad_conv3d                    Pad -> Conv3D (oneDNN)
  tensor_to_hash_bucket         AsString -> StringToHashBucketFast

Grappler's other optimizers (constant folding, arithmetic, layout) rewrite nodes in
place or add nodes under new names; none was seen moving a named node (measured in
docs/profiles.md).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np

CONTRACTIONS = frozenset(("MatMul", "Conv2D", "Conv3D", "DepthwiseConv2dNative"))
ACTIVATIONS = frozenset(("Relu", "Relu6", "Elu", "LeakyRelu", "Tanh", "Sigmoid"))
ADDS = frozenset(("Add", "AddV2", "AddN"))
BATCH_NORMS = frozenset(("FusedBatchNorm", "FusedBatchNormV2", "FusedBatchNormV3"))
BATCH_NORM_GRADS = frozenset(("FusedBatchNormGrad", "FusedBatchNormGradV2", "FusedBatchNormGradV3"))
GELU_OPS = frozenset(("Mul", "AddV2", "Add", "Neg", "Erf", "Erfc", "Tanh", "Square", "Pow", "RealDiv"))
GELU_CURVES = frozenset(("Erf", "Erfc", "Tanh"))


@dataclass
class Fusions:
    """Node groups Grappler may fuse: `groups` (node id lists, one per match), `ties`
    (pairs of node ids joining each group) and matches per pattern."""

    groups: list = field(default_factory=list)
    ties: list = field(default_factory=list)
    counts: dict = field(default_factory=dict)


def spread_fused_times(comp_us, timed, groups):
    """(compute times, nodes given time) with each fused group's time spread evenly.

    In a profile taken with Grappler on, a fused kernel is timed under one of its
    pattern's names (usually the last node's) and the nodes it replaced are absent
    from the step stats. A group with timed and
    untimed members (fusion happened) gets the sum of its members' times split equally
    among all of them; a group timed throughout (not fused) keeps its times. The
    group is one colocation group, so the split moves no time between devices."""
    comp = np.asarray(comp_us, np.float64).copy()
    given = 0
    for members in groups:
        hit = timed[members]
        if hit.any() and not hit.all():
            comp[members] = comp[members].sum() / len(members)
            given += int((~hit).sum())
    return comp, given


def fusion_ties(table) -> Fusions:
    """Every fusable pattern of a GraphTable, larger patterns first (as the remapper,
    which visits a pattern's last node before its first; Gelu's element-wise nodes
    come after any Add they contain); a node joins one match."""
    m = _Matcher(table)
    ops = np.asarray(table.ops, dtype=object)
    taken = np.zeros(table.num_nodes, bool)
    fusions = Fusions()
    counts = Counter()
    for name, root_ops, rule in m.rules():
        for root in np.flatnonzero(np.isin(ops, list(root_ops)) & ~taken).tolist():
            members = rule(root) if not taken[root] else None
            if members and not taken[members].any():
                taken[members] = True
                counts[name] += 1
                fusions.groups.append(members)
                fusions.ties.extend((members[0], j) for j in members[1:])
    fusions.counts = dict(sorted(counts.items()))
    return fusions


class _Matcher:
    """Regular (data) inputs of every node, in port order, and the pattern rules."""

    def __init__(self, table):
        self.ops = table.ops
        self.table = table
        data = table.edge_slot >= 0
        dst, src = table.edge_dst[data], table.edge_src[data]
        order = np.argsort(dst, kind="stable")          # keeps each node's input order
        ptr = np.zeros(table.num_nodes + 1, np.int64)
        np.cumsum(np.bincount(dst, minlength=table.num_nodes), out=ptr[1:])
        self.ptr, self.src = ptr.tolist(), src[order].tolist()
        self.slot = table.edge_slot[data][order].tolist()
        self.consumers = None

    def rules(self):
        """(pattern name, ops its last node can have, rule) in matching order."""
        act, bias_ops = ACTIVATIONS, ("BiasAdd", "Add", "AddV2")
        return [("matmul_bias_gelu", bias_ops, self.gelu),
                ("contraction_bias_add_activation", act, self.activation_of(self.bias_add)),
                ("contraction_bias_add", ADDS, self.bias_add),
                ("contraction_bias_activation", act, self.activation_of(self.bias)),
                ("conv_batchnorm_activation", act, self.activation_of(self.conv_batchnorm)),
                ("conv_squeeze_bias", ("BiasAdd",), self.squeeze_bias),
                ("contraction_bias", bias_ops, self.bias),
                ("conv_batchnorm", BATCH_NORMS, self.conv_batchnorm),
                ("batchnorm_activation", act, self.batchnorm_activation),
                ("batchnorm_grad", BATCH_NORM_GRADS, self.batchnorm_grad),
                ("mish", ("Mul",), self.mish),
                ("swish", ("Mul",), self.swish),
                ("batch_matmul_mul_add", ("AddV2",), self.batch_matmul),
                ("pad_conv3d", ("Conv3D",), self.pad_conv3d),
                ("tensor_to_hash_bucket", ("StringToHashBucketFast",), self.hash_bucket)]

    def inputs(self, i):
        return self.src[self.ptr[i]:self.ptr[i + 1]]

    def input0(self, i, ops):
        ins = self.inputs(i)
        return ins[0] if ins and self.ops[ins[0]] in ops else None

    # -- contractions ------------------------------------------------------
    def bias(self, i):
        if self.ops[i] == "BiasAdd":
            c = self.input0(i, CONTRACTIONS)
            return [c, i] if c is not None else None
        ins = self.inputs(i)
        if self.ops[i] in ("Add", "AddV2") and len(ins) == 2:      # oneDNN: Add used as BiasAdd
            for k in (0, 1):
                if self.ops[ins[k]] in CONTRACTIONS and self._rank(i, 1 - k) == 1:
                    return [ins[k], i]
        return None

    def bias_add(self, i):
        ins = self.inputs(i)
        if self.ops[i] not in ADDS or len(ins) != 2:
            return None
        for j in ins:
            found = self.bias(j) if self.ops[j] == "BiasAdd" else None
            if found:
                return found + [i]
        return None

    def squeeze_bias(self, i):
        s = self.input0(i, ("Squeeze",)) if self.ops[i] == "BiasAdd" else None
        c = self.input0(s, ("Conv2D", "Conv3D")) if s is not None else None
        return [c, s, i] if c is not None else None

    def conv_batchnorm(self, i):
        if self.ops[i] not in BATCH_NORMS or self._training(i):
            return None
        c = self.input0(i, ("Conv2D",))
        return [c, i] if c is not None else None

    def activation_of(self, inner):
        def rule(i):
            if self.ops[i] not in ACTIVATIONS or not self.inputs(i):
                return None
            found = inner(self.inputs(i)[0])
            return found + [i] if found else None
        return rule

    def gelu(self, i):
        """x = BiasAdd(MatMul) and the element-wise nodes computing only from x and
        constants, when they include Erf, Erfc or Tanh and a Mul of two of them (x
        times its curve: tf.nn.gelu, exact or approximate)."""
        found = self.bias(i)
        if not found or self.ops[found[0]] != "MatMul":
            return None
        closure = self._elementwise_closure(i)
        inside = set(closure) | {i}
        has_curve = any(self.ops[j] in GELU_CURVES for j in closure)
        product = any(self.ops[j] == "Mul" and all(k in inside for k in self.inputs(j)) for j in closure)
        return found + closure if has_curve and product else None

    def _elementwise_closure(self, x):
        consumers = self._consumers()
        inside = {x}
        queue = [x]
        closure = []
        while queue:
            u = queue.pop(0)
            for v in consumers[u]:
                if v in inside or self.ops[v] not in GELU_OPS:
                    continue
                if all(k in inside or self.ops[k] == "Const" for k in self.inputs(v)):
                    inside.add(v)
                    closure.append(v)
                    queue.append(v)
        return sorted(closure)

    # -- batch norm --------------------------------------------------------
    def batchnorm_activation(self, i):
        if self.ops[i] not in ACTIVATIONS or not self.inputs(i):
            return None
        j = self.inputs(i)[0]
        if self.ops[j] in BATCH_NORMS:
            return [j, i]
        if self.ops[j] in ADDS:
            bn = [k for k in self.inputs(j) if self.ops[k] in BATCH_NORMS]
            return [bn[0], j, i] if bn else None
        return None

    def batchnorm_grad(self, i):
        g = self.input0(i, ("ReluGrad",)) if self.ops[i] in BATCH_NORM_GRADS else None
        return [g, i] if g is not None else None

    # -- oneDNN element-wise and others ----------------------------------------
    def swish(self, i):
        ins = self.inputs(i)
        if self.ops[i] != "Mul" or len(ins) != 2:
            return None
        for a, b in ((ins[0], ins[1]), (ins[1], ins[0])):
            if self.ops[b] == "Sigmoid" and self.inputs(b)[:1] == [a]:
                return [b, i]
        return None

    def mish(self, i):
        ins = self.inputs(i)
        if self.ops[i] != "Mul" or len(ins) != 2:
            return None
        for a, b in ((ins[0], ins[1]), (ins[1], ins[0])):
            s = self.input0(b, ("Softplus",)) if self.ops[b] == "Tanh" else None
            if s is not None and self.inputs(s)[:1] == [a]:
                return [s, b, i]
        return None

    def batch_matmul(self, i):
        if self.ops[i] != "AddV2":
            return None
        for j in self.inputs(i):
            if self.ops[j] == "Mul":
                b = [k for k in self.inputs(j) if self.ops[k].startswith("BatchMatMul")]
                if b:
                    return [b[0], j, i]
        return None

    def pad_conv3d(self, i):
        p = self.input0(i, ("Pad",)) if self.ops[i] == "Conv3D" else None
        return [p, i] if p is not None else None

    def hash_bucket(self, i):
        a = self.input0(i, ("AsString",)) if self.ops[i] == "StringToHashBucketFast" else None
        return [a, i] if a is not None else None

    # -- helpers -------------------------------------------------------------
    def _consumers(self):
        if self.consumers is None:
            self.consumers = [[] for _ in self.ops]
            for v in range(len(self.ops)):
                for u in self.inputs(v):
                    self.consumers[u].append(v)
        return self.consumers

    def _rank(self, i, port):
        """Static rank of node i's input `port` (from _output_shapes), -1 if unknown."""
        k = self.ptr[i] + port
        node = self.table.graph_def.node[self.src[k]]
        shapes = node.attr["_output_shapes"].list.shape if "_output_shapes" in node.attr else ()
        slot = self.slot[k]
        if slot >= len(shapes) or shapes[slot].unknown_rank:
            return -1
        return len(shapes[slot].dim)

    def _training(self, i):
        attr = self.table.graph_def.node[i].attr
        return attr["is_training"].b if "is_training" in attr else True

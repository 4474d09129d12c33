"""Micro-batches for a TF1 training graph: `pardnn profile MODEL --micro-batches M` (issue 50).

The model is built twice: at its batch B, for its feed (the data of the unsplit
step), and at B / M, the graph that is split. The rewrite (`split_graph_def`) works on
that graph's GraphDef and needs nothing of the model's code, so a user's script is
split as a built-in family is:

- The fed batch: every placeholder whose first dimension is B / M in the small build
  and B in the full one. It keeps its name and takes the full batch; a Split op cuts
  it into M slices.
- The per-sample part D: the ops that depend on a fed batch and lead to the loss or
  to the gradients (TF's `gradients` name scope, where tf.gradients and
  Optimizer.minimize put them), with everything between. D is copied once per
  micro-batch, as `micro_batch_<i>/<name>`, each copy reading its slice; ops outside D
  (variables and their reads, the optimizer, gradient clipping, the batch-norm
  moving averages) stay single and are shared by the copies.
- Where an op outside D reads a tensor of D (a gradient, the loss, a batch
  statistic), it reads the copies' mean instead: for a loss that is a mean over the
  samples, the gradients' mean is the full batch's gradient up to rounding, and one
  update runs per step. For a loss that is a sum over the samples (e3d's), it reads
  their sum. Which one is read from the ops between the loss and its reductions
  (`_loss_kind`); any other loss is refused, naming it. A sparse gradient
  (tf.IndexedSlices: an int32/int64 indices tensor and the float values beside it,
  from one gradient op's scope) is concatenated instead, the values scaled as the
  dense ones, as the full batch's would hold them. The loss keeps its name.
- Batch-coupled ops (batch normalisation's moments, FusedBatchNorm) compute
  per-micro-batch statistics, as in GPipe; `coupled` names their scopes. An op
  inside D that writes a variable would run M times: refused, naming it.
"""

from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass

import tensorflow as tf

from pardnn.base.errors import UserError
from pardnn.models import Model, build_model

GRADIENTS = re.compile(r"(^|/)gradients(_\d+)?/")
WRITES = re.compile(r"^(Assign|ResourceApply|ResourceSparseApply|ApplyAdam|ScatterUpdate|ResourceScatter)")
COUPLING = ("FusedBatchNorm", "FusedBatchNormV2", "FusedBatchNormV3")


@dataclass(frozen=True)
class Split:
    """What the rewrite did: the micro-batch count, the ops copied per micro-batch, the
    tensors combined, and the scopes whose statistics are per micro-batch."""

    micro_batches: int
    per_sample_ops: int
    combined: int
    coupled: tuple
    loss: str = "mean"          # "mean" or "sum": how the loss reduces the samples


def check_count(micro_batches: int, batch: int, name: str) -> None:
    """UserError naming --micro-batches and the batch unless M divides it (1 <= M <= B)."""
    if not 1 <= micro_batches <= batch or batch % micro_batches:
        raise UserError(f"--micro-batches: {micro_batches} micro-batches cannot split {name}'s batch of {batch} "
                        f"samples (give a divisor of {batch} from 1 to {batch})")


def micro_batched_model(module, name, knobs, micro_batches: int):
    """(Model, Split or None): the model of `knobs` built as `micro_batches` micro-batches
    (the module docstring); M = 1 builds it as it is."""
    if "batch" not in knobs:
        raise UserError(f"--micro-batches: {name} has no `batch` knob (KNOBS) saying what to split")
    check_count(micro_batches, int(knobs["batch"]), name)
    full = build_model(module, name, knobs)
    if micro_batches == 1:
        return full, None
    small = build_model(module, name, {**knobs, "batch": knobs["batch"] // micro_batches})
    graph_def, split = split_graph_def(small.graph, full.graph, small.loss, micro_batches, name)
    graph = _imported(small.graph, graph_def)
    model = Model(graph=graph, train_op=small.train_op, loss=small.loss, init=small.init, feed=full.feed,
                  seed=small.seed, extra=dict(small.extra))
    return model, split


def _imported(small, graph_def):
    """A tf.Graph of `graph_def` with the small build's collections (its variables,
    UPDATE_OPS, ...), which name ops outside the per-sample part and so still exist:
    the small build's MetaGraphDef with its GraphDef replaced."""
    with small.as_default():
        meta = tf.compat.v1.train.export_meta_graph(graph=small)
    meta.graph_def.CopyFrom(graph_def)
    graph = tf.Graph()
    with graph.as_default():
        tf.compat.v1.train.import_meta_graph(meta)
    return graph


def split_graph_def(small, full, loss, m: int, name: str = "MODEL"):
    """(GraphDef, Split): tf.Graph `small` (built at B / M) rewritten as M micro-batches
    of the batch `full` (built at B) is fed; `loss` the loss tensor's name."""
    graph_def = small.as_graph_def()
    nodes = {n.name: n for n in graph_def.node}
    fed = _fed_batch(small, full, m)
    if not fed:
        raise UserError(f"--micro-batches: no placeholder of {name} has the batch as its first dimension")
    loss_op = loss.split(":")[0]
    per_sample = _per_sample(nodes, fed, loss_op)
    if loss_op not in per_sample:
        raise UserError(f"--micro-batches: {name}'s loss {loss!r} does not depend on a fed batch")
    for n in per_sample:
        if WRITES.match(nodes[n].op):
            raise UserError(f"--micro-batches: op {n!r} ({nodes[n].op}) of {name} writes a variable inside the "
                            f"per-sample part of the step; it would run once per micro-batch")
    kind = _loss_kind(nodes, per_sample, loss_op, loss, name)
    writer = _Writer(small, nodes, per_sample, fed, m, loss_op, 1.0 / m if kind == "mean" else 1.0)
    out = writer.rewrite()
    out.versions.CopyFrom(graph_def.versions)
    out.library.CopyFrom(graph_def.library)
    return out, Split(m, len(per_sample), writer.combined, _coupled(nodes, per_sample), kind)


def _fed_batch(small, full, m) -> dict:
    """{placeholder name: its full shape} of the placeholders that hold the batch."""
    fed = {}
    for op in small.get_operations():
        if op.type not in ("Placeholder", "PlaceholderV2"):
            continue
        shape = op.outputs[0].shape
        try:
            whole = full.get_operation_by_name(op.name).outputs[0].shape
        except KeyError:
            continue
        if shape.rank and whole.rank == shape.rank and shape[0] is not None and whole[0] == shape[0] * m:
            fed[op.name] = whole
    return fed


def _inputs(node):
    """(producer, slot or -1 for control) per input of a NodeDef."""
    for text in node.input:
        if text.startswith("^"):
            yield text[1:], -1
        else:
            producer, _, slot = text.partition(":")
            yield producer, int(slot or 0)


def _per_sample(nodes, fed, loss_op) -> set:
    """D: ops that depend on a fed batch and lead to the loss or the gradients."""
    consumers = {}
    for n in nodes.values():
        for producer, _ in _inputs(n):
            consumers.setdefault(producer, []).append(n.name)
    below, queue = set(), deque(fed)
    while queue:
        for c in consumers.get(queue.popleft(), ()):
            if c not in below:
                below.add(c)
                queue.append(c)
    seeds = [n for n in below if n == loss_op or GRADIENTS.search(n)]
    inside, queue = set(seeds), deque(seeds)
    while queue:
        for producer, _ in _inputs(nodes[queue.popleft()]):
            if producer in below and producer not in inside:
                inside.add(producer)
                queue.append(producer)
    return inside


PASS = ("Identity", "AddV2", "Add", "AddN", "Sub", "Mul", "RealDiv", "Neg", "Cast")
SUMS = ("Sum", "L2Loss")


def _loss_kind(nodes, per_sample, loss_op, loss, name) -> str:
    """"mean" or "sum": how the loss reduces the batch's samples, read from the ops
    between it and its reductions (through sums, scalings and casts). A loss that is
    neither, or a sum beside a term that does not depend on the batch (it would be
    counted once per micro-batch), is a UserError naming it."""
    kinds, beside, stack, seen = set(), False, [loss_op], set()
    while stack:
        node = nodes[stack.pop()]
        if node.name in seen:
            continue
        seen.add(node.name)
        if node.op == "Mean":
            kinds.add("mean")
        elif node.op in SUMS:
            kinds.add("sum")
        elif node.op in PASS:
            data = [p for p, slot in _inputs(node) if slot >= 0]
            beside |= node.op in ("AddV2", "Add", "AddN", "Sub") and any(p not in per_sample for p in data)
            stack.extend(p for p in data if p in per_sample)
        else:
            kinds.add(node.op)
    if kinds == {"sum"} and beside:
        kinds.add("a term that does not depend on the batch")
    if len(kinds) != 1 or kinds - {"mean", "sum"}:
        raise UserError(f"--micro-batches: {name}'s loss {loss!r} is not a mean or a sum over the batch's "
                        f"samples (it reduces through {', '.join(sorted(kinds))}); it cannot be split")
    return kinds.pop()


def _coupled(nodes, per_sample) -> tuple:
    """Scopes of the forward ops of D that reduce over the batch's axis 0 (batch
    normalisation's moments, FusedBatchNorm): their statistics are per micro-batch."""
    scopes = set()
    for n in per_sample:
        node = nodes[n]
        if GRADIENTS.search(n):
            continue
        if node.op in COUPLING and node.attr["is_training"].b:
            scopes.add(n.rsplit("/", 1)[0])
        elif node.op == "Mean" and "/moments/" in n and 0 in _axes(nodes, node):
            scopes.add(n.split("/moments/")[0])
    return tuple(sorted(scopes))


def _axes(nodes, node) -> list:
    """The constant reduction axes of a Mean op ([] when they are not a constant)."""
    producer = list(_inputs(node))[1][0]
    axes = nodes.get(producer)
    if axes is None or axes.op != "Const":
        return []
    return [int(a) for a in tf.make_ndarray(axes.attr["value"].tensor).ravel()]


class _Writer:
    """Writes the split GraphDef (split_graph_def): the copies, the slices, the means."""

    def __init__(self, small, nodes, per_sample, fed, m, loss_op, scale):
        self.small, self.nodes, self.inside, self.fed, self.m = small, nodes, per_sample, fed, m
        self.loss_op, self.scale = loss_op, scale
        self.out = tf.compat.v1.GraphDef()
        self.means = {}                 # (producer, slot) -> the combined tensor's name
        self.combined = 0
        self.sparse = self._sparse_tensors()

    def rewrite(self):
        self._const("micro_batches/axis", tf.int32, 0)
        for node in self.nodes.values():
            if node.name in self.inside:
                continue
            copy = self.out.node.add()
            copy.CopyFrom(node)
            if node.name in self.fed:
                copy.attr["shape"].shape.CopyFrom(self.fed[node.name].as_proto())
                self._split_of(node)
            del copy.input[:]
            copy.input.extend(text for p, s in _inputs(node) for text in self._outside_inputs(p, s))
            self._colocate(copy, 0)         # colocated with an op of D: with its first copy
        for i in range(self.m):
            for name in self.nodes:
                if name in self.inside:
                    self._copy(self.nodes[name], i)
        self._combined(self.loss_op, 0)         # the fetched loss: the copies' mean, by its name
        return self.out

    def _copy(self, node, i):
        copy = self.out.node.add()
        copy.CopyFrom(node)
        copy.name = self._name(node.name, i)
        del copy.input[:]
        for producer, slot in _inputs(node):
            if slot < 0:
                copy.input.append("^" + (self._name(producer, i) if producer in self.inside else producer))
            elif producer in self.inside:
                copy.input.append(f"{self._name(producer, i)}:{slot}")
            elif producer in self.fed:
                copy.input.append(f"{producer}/micro_batches:{i}")
            else:
                copy.input.append(f"{producer}:{slot}")
        self._colocate(copy, i)

    def _colocate(self, copy, i):
        """A colocation with an op of D (attr `_class`) becomes one with its copy i."""
        if "_class" in copy.attr:
            locs = [loc.decode() for loc in copy.attr["_class"].list.s]
            copy.attr["_class"].list.s[:] = [
                (f"loc:@{self._name(loc[5:], i)}" if loc.startswith("loc:@") and loc[5:] in self.inside
                 else loc).encode() for loc in locs]

    @staticmethod
    def _name(name, i):
        return f"micro_batch_{i}/{name}"

    def _split_of(self, placeholder):
        node = self.out.node.add()
        node.name, node.op = f"{placeholder.name}/micro_batches", "Split"
        node.input.extend(["micro_batches/axis", placeholder.name])
        node.attr["num_split"].i = self.m
        node.attr["T"].type = placeholder.attr["dtype"].type

    def _outside_inputs(self, producer, slot):
        """The inputs of an op outside D for one of its inputs: a tensor of D becomes the
        copies' mean, a control input from D one from every copy."""
        if producer not in self.inside:
            return [("^" + producer) if slot < 0 else f"{producer}:{slot}"]
        if slot < 0:
            return ["^" + self._name(producer, i) for i in range(self.m)]
        return [self._combined(producer, slot)]

    def _combined(self, producer, slot):
        key = (producer, slot)
        if key not in self.means:
            self.means[key] = self._write_combined(producer, slot)
            self.combined += 1
        return self.means[key]

    def _write_combined(self, producer, slot):
        dtype = self.small.get_operation_by_name(producer).outputs[slot].dtype
        copies = [f"{self._name(producer, i)}:{slot}" for i in range(self.m)]
        base = producer if producer == self.loss_op else f"micro_batches/{producer}_{slot}"
        if (producer, slot) in self.sparse:
            joined = self._node(f"{base}/concat" if dtype.is_floating else base, "ConcatV2",
                                copies + ["micro_batches/axis"], N=self.m, T=dtype, Tidx=tf.int32)
            return self._scaled(base, joined, dtype) if dtype.is_floating else joined
        if not (dtype.is_floating or dtype.is_complex):
            return copies[0]            # a shape, a count: the same in every copy
        return self._scaled(base, self._node(f"{base}/sum", "AddN", copies, N=self.m, T=dtype), dtype)

    def _scaled(self, base, tensor, dtype):
        self._const(f"{base}/scale", dtype, self.scale)
        return self._node(base, "Mul", [tensor, f"{base}/scale"], T=dtype)

    def _node(self, name, op, inputs, **attrs):
        node = self.out.node.add()
        node.name, node.op = name, op
        node.input.extend(inputs)
        for key, value in attrs.items():
            if isinstance(value, tf.dtypes.DType):
                node.attr[key].type = value.as_datatype_enum
            else:
                node.attr[key].i = value
        return name

    def _const(self, name, dtype, value):
        node = self.out.node.add()
        node.name, node.op = name, "Const"
        node.attr["dtype"].type = dtype.as_datatype_enum
        node.attr["value"].tensor.CopyFrom(tf.make_tensor_proto(value, dtype=dtype))

    def _sparse_tensors(self) -> set:
        """Tensors of D read outside it that are an IndexedSlices' indices (integer), and
        the float tensors of the same gradient op's scope beside them (its values)."""
        read = set()
        for node in self.nodes.values():
            if node.name not in self.inside:
                read.update((p, s) for p, s in _inputs(node) if p in self.inside and s >= 0)
        dtype = {(p, s): self.small.get_operation_by_name(p).outputs[s].dtype for p, s in read}
        scopes = {p.rsplit("/", 1)[0] for (p, s) in read if dtype[(p, s)].is_integer and GRADIENTS.search(p)}
        return {(p, s) for (p, s) in read
                if p.rsplit("/", 1)[0] in scopes and (dtype[(p, s)].is_integer or dtype[(p, s)].is_floating)}

"""Synthetic training-like cost graphs, large enough to benchmark placers and the emulator.

    python -m tools.synth_graph --nodes 200000 --seed 0 -o /tmp/synth200k.json
    python -m tools.synth_graph --shape chain --nodes 20000 -o /tmp/chain20k.json

or, from Python at the repository root (importing this module has no side effects):

    from tools.synth_graph import synth_graph
    graph = synth_graph(200_000, seed=0)

The graph mimics a TF1 training step:
- a forward pass of layers along a trunk; a layer is 1-6 parallel branches (fork-join,
  as in Inception blocks) of 1-4 ops each, joined by a concat, and now and then a
  skip connection (ResNet-like add) back to the layer's input;
- about a third of the branch heads are weight ops (MatMul/Conv) that read a variable:
  the variable and its optimizer slot are RESIDUAL nodes (persist_bytes), the read is
  a REFERENCE Identity, and variable, read, slot and the apply op share a colocation
  group, as TF's resource colocation forces;
- a mirrored backward pass: one gradient op per forward op that reads the upstream
  gradient and the op's saved forward input (activations stay live across the step;
  a join's gradient only splits the upstream gradient),
  an AddN where a forward tensor had several consumers, and for each weight op a
  weight-gradient op feeding the variable's apply op;
- a final train_op (NoOp) with control edges from every apply op.
`--shape chain` makes near-chains instead (parallelism about 1.0-1.3, the shape of
layer-level CNN and BERT training profiles): layers are mostly one branch, skips are
rarer, and activations are larger and ops cheaper, so moving a tensor over a 10 GB/s
link takes longer than the mean op; what decides the step is where a graph that does
not fit one device is cut.
Compute times and tensor sizes are lognormal (a few cheap ops, a long tail of expensive
ones); gradient ops cost about twice their forward op. Nodes are emitted in topological
order, so building the CostGraph needs no sort. About 1.5 edges per node.
"""

from __future__ import annotations

import argparse
import random
import sys
import time

import numpy as np
from tools.commit_line import print_commit

NORMAL, RESIDUAL, REFERENCE = 0, 1, 2   # same values as pardnn.graph.costgraph


class _Builder:
    """Append-only node and edge lists, with op names, kinds and cost classes."""

    def __init__(self):
        self.names, self.ops, self.kind, self.group = [], [], [], []
        self.cost_class = []        # 0 cheap, 1 elementwise, 2 weight op, 3 gradient
        self.size_of = []           # activation-size class index (per layer)
        self.src, self.dst, self.slot, self.edge_kind = [], [], [], []

    def node(self, name, op, kind, cost_class, size, group=None):
        i = len(self.names)
        self.names.append(f"{name}_{i}")
        self.ops.append(op)
        self.kind.append(kind)
        self.group.append(i if group is None else group)
        self.cost_class.append(cost_class)
        self.size_of.append(size)
        return i

    def edge(self, u, v, control=False):
        self.src.append(u)
        self.dst.append(v)
        self.slot.append(-1 if control else 0)
        self.edge_kind.append(1 if control else 0)


SHAPES = {
    # branches per layer, skip probability, activation MB (median), op time scale
    "dag": ((1, 1, 2, 3, 4, 6), 0.2, 0.5e6, 1.0),
    "chain": ((1, 1, 1, 1, 1, 1, 1, 1, 1, 2), 0.1, 2.0e6, 0.5),
}


def _forward(b, rng, budget, shape):
    """Emit forward layers until the predicted graph size reaches `budget` nodes.

    Returns (forward ops in order, their data inputs, their variable or -1)."""
    fwd, inputs, weight = [], [], []
    consumers = {}
    predicted = 1                       # the train_op

    def op(name, opname, ins, size, var=-1):
        nonlocal predicted
        i = b.node(name, opname, NORMAL, 2 if var >= 0 else 1, size)
        for u in ins:
            b.edge(u, i)
            consumers[u] = consumers.get(u, 0) + 1
            predicted += consumers[u] == 2          # this tensor will need an AddN
        if var >= 0:
            b.edge(var + 1, i)                      # the variable's read
        fwd.append(i)
        inputs.append(ins)
        weight.append(var)
        predicted += 2 if var < 0 else 7            # op + grad (+ var, read, slot, wgrad, apply)
        return i

    trunk = b.node("input/IteratorGetNext", "IteratorGetNext", NORMAL, 1, 0)
    layer = 0
    while predicted < budget:
        scope = f"layer{layer}"
        start, ends = trunk, []
        for br in range(rng.choice(SHAPES[shape][0])):
            x = start
            for k in range(rng.randint(1, 4)):
                var = -1
                if k == 0 and rng.random() < 0.35:
                    var = _variable(b, f"{scope}/b{br}/w", layer)
                x = op(f"{scope}/b{br}/op{k}", "MatMul" if var >= 0 else "Relu", [x], layer, var)
            ends.append(x)
        trunk = ends[0] if len(ends) == 1 else op(f"{scope}/concat", "ConcatV2", ends, layer)
        if rng.random() < SHAPES[shape][1]:
            trunk = op(f"{scope}/skip", "AddV2", [trunk, start], layer)
        layer += 1
    op("loss", "SoftmaxCrossEntropyWithLogits", [trunk], layer)
    return fwd, inputs, weight


def _variable(b, name, layer):
    """Variable, its read and one optimizer slot: one colocation group."""
    v = b.node(f"{name}/var", "VariableV2", RESIDUAL, 0, layer)
    b.node(f"{name}/read", "Identity", REFERENCE, 0, layer, group=v)
    b.edge(v, v + 1)
    b.node(f"{name}/momentum", "VariableV2", RESIDUAL, 0, layer, group=v)
    return v


def _backward(b, fwd, inputs, weight):
    """Mirror the forward pass; returns the apply ops."""
    grad_in = {}                        # forward tensor -> gradient ops flowing into it
    applies = []
    for f, ins, var in zip(reversed(fwd), reversed(inputs), reversed(weight)):
        size = b.size_of[f]
        ups = grad_in.get(f, [])
        if len(ups) > 1:
            s = b.node(f"grad/{b.names[f]}/AddN", "AddN", NORMAL, 1, size)
            for u in ups:
                b.edge(u, s)
            ups = [s]
        g = b.node(f"grad/{b.names[f]}", "Grad", NORMAL, 3, size)
        for u in ups + (ins if len(ins) == 1 else []):      # a join's gradient only splits
            b.edge(u, g)
        if var >= 0:
            b.edge(var + 1, g)
            wg = b.node(f"grad/{b.names[var]}/wgrad", "MatMul", NORMAL, 3, size)
            for u in ups + ins:
                b.edge(u, wg)
            a = b.node(f"{b.names[var]}/apply", "ApplyMomentum", NORMAL, 1, size, group=var)
            for u in (var, var + 2, wg):
                b.edge(u, a)
            applies.append(a)
        for u in ins:
            grad_in.setdefault(u, []).append(g)
    return applies


def synth_graph(nodes: int = 200_000, seed: int = 0, shape: str = "dag"):
    """A training-like CostGraph of about `nodes` nodes (see the module docstring)."""
    from pardnn.graph import CostGraph

    rng = random.Random(seed)
    b = _Builder()
    fwd, inputs, weight = _forward(b, rng, max(int(nodes), 8), shape)
    applies = _backward(b, fwd, inputs, weight)
    train = b.node("train_op", "NoOp", NORMAL, 0, 0)
    for a in applies:
        b.edge(a, train, control=True)
    return CostGraph.build(names=b.names, ops=b.ops, kind=b.kind, group=b.group,
                           edge_src=b.src, edge_dst=b.dst, **_costs(b, seed, shape))


def _costs(b, seed, shape):
    """Lognormal compute times and sizes, vectorised over nodes and edges."""
    r = np.random.default_rng(seed)
    n = len(b.names)
    cls = np.asarray(b.cost_class)
    kind = np.asarray(b.kind)
    _, _, median_bytes, time_scale = SHAPES[shape]
    layer_mb = r.lognormal(np.log(median_bytes), 1.0, max(b.size_of) + 1)      # activation size per layer
    out_bytes = (layer_mb[b.size_of] * r.lognormal(0.0, 0.3, n)).astype(np.int64)
    comp = np.choose(cls, [np.full(n, 2.0), r.lognormal(np.log(15), 0.8, n),
                           r.lognormal(np.log(120), 1.0, n), r.lognormal(np.log(60), 1.0, n)])
    comp *= np.where(cls == 3, 1.0 + out_bytes / 1e6, 1.0) * time_scale
    persist = np.where(kind == RESIDUAL, r.lognormal(np.log(1e6), 1.2, n), 0).astype(np.int64)
    out_bytes[kind != NORMAL] = 0
    out_bytes[cls == 0] = np.minimum(out_bytes[cls == 0], 64)
    tensor = out_bytes + persist                 # a variable's edges carry its value
    reads = np.flatnonzero(kind == REFERENCE)
    tensor[reads] = persist[reads - 1]           # a read is emitted right after its variable
    src = np.asarray(b.src, np.int64)
    ebytes = np.where(np.asarray(b.edge_kind) == 1, 0, tensor[src])
    return {"comp_us": comp, "out_bytes": out_bytes, "persist_bytes": persist,
            "edge_bytes": ebytes, "edge_slot": b.slot}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=int, default=200_000, help="about how many nodes (default 200000)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--shape", choices=sorted(SHAPES), default="dag",
                   help="dag: branchy layers (default); chain: near-chain layers with large activations")
    p.add_argument("-o", "--out", required=True, help="cost graph JSON to write")
    args = p.parse_args(argv)
    print_commit()
    t0 = time.perf_counter()
    graph = synth_graph(args.nodes, args.seed, args.shape)
    t1 = time.perf_counter()
    graph.to_json(args.out)
    print(f"{graph.num_nodes} nodes, {graph.num_edges} edges, {graph.num_groups} groups; "
          f"built in {t1 - t0:.2f} s, wrote {args.out} in {time.perf_counter() - t1:.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Benchmark `load_profile` on a synthetic training-like profile dir of ~N nodes.

The GraphDef and RunMetadata protos are generated directly (building a 200k-node
graph through the TF Python API takes minutes): a deep MLP-like chain of blocks,
each with a resource variable and its two Adam slots (colocated by `_class`), a
ReadVariableOp, MatMul, BiasAdd, Relu, the backward MatMuls and a
ResourceApplyAdam, plus control edges to a final `train` NoOp. Every node is timed
in every step, with measured output sizes.

    python -m tools.bench_load_profile --nodes 200000 --steps 5
prints the generation time, the size of the files and the load time by stage.
"""

import argparse
import os
import tempfile
import time


import pardnn.tf.quiet_import  # noqa: F401  (quiet TensorFlow import first)
from tensorflow.core.framework import graph_pb2, tensor_shape_pb2, types_pb2
from tensorflow.core.protobuf import config_pb2

from pardnn.tf import load_profile
from tools.commit_line import print_commit

WIDTH, BATCH = 64, 32
NODES_PER_BLOCK = 12


def _node(graph_def, name, op, inputs=(), dtype="T", shape=None, colocate=None):
    node = graph_def.node.add(name=name, op=op)
    node.input.extend(inputs)
    if dtype == "T":
        node.attr["T"].type = types_pb2.DT_FLOAT
    elif dtype:
        node.attr[dtype].type = types_pb2.DT_FLOAT
    if shape is not None:
        node.attr["_output_shapes"].list.shape.add().dim.extend(
            [tensor_shape_pb2.TensorShapeProto.Dim(size=s) for s in shape])
    if colocate:
        node.attr["_class"].list.s.append(f"loc:@{colocate}".encode())
    return node


def _variable(graph_def, name, colocate=None):
    node = _node(graph_def, name, "VarHandleOp", dtype="dtype", colocate=colocate)
    node.attr["shape"].shape.dim.add(size=WIDTH)
    node.attr["shape"].shape.dim.add(size=WIDTH)
    node.attr["shared_name"].s = name.encode()


def synth_graph(blocks):
    g = graph_pb2.GraphDef()
    _node(g, "x", "Placeholder", dtype="dtype", shape=(BATCH, WIDTH))
    for name in ("lr", "beta1", "beta2", "eps", "beta1_power", "beta2_power"):
        c = _node(g, name, "Const", dtype="dtype", shape=())
        c.attr["value"].tensor.dtype = types_pb2.DT_FLOAT
    prev = "x"
    for b in range(blocks):
        w = f"b{b}/w"
        _variable(g, w)
        _variable(g, f"{w}/Adam", colocate=w)
        _variable(g, f"{w}/Adam_1", colocate=w)
        read = _node(g, f"b{b}/read", "ReadVariableOp", [w], dtype="dtype", shape=(WIDTH, WIDTH))
        _node(g, f"b{b}/MatMul", "MatMul", [prev, read.name], shape=(BATCH, WIDTH))
        _node(g, f"b{b}/BiasAdd", "BiasAdd", [f"b{b}/MatMul", read.name], shape=(BATCH, WIDTH))
        prev = _node(g, f"b{b}/Relu", "Relu", [f"b{b}/BiasAdd"], shape=(BATCH, WIDTH)).name
    grad = prev
    for b in reversed(range(blocks)):
        _node(g, f"grad/b{b}/ReluGrad", "ReluGrad", [grad, f"b{b}/Relu"], shape=(BATCH, WIDTH))
        _node(g, f"grad/b{b}/dW", "MatMul", [f"b{b}/Relu", f"grad/b{b}/ReluGrad"], shape=(WIDTH, WIDTH))
        grad = _node(g, f"grad/b{b}/dX", "MatMul", [f"grad/b{b}/ReluGrad", f"b{b}/read"], shape=(BATCH, WIDTH)).name
        w = f"b{b}/w"
        _node(g, f"train/update_b{b}", "ResourceApplyAdam",
              [w, f"{w}/Adam", f"{w}/Adam_1", "beta1_power", "beta2_power", "lr", "beta1", "beta2", "eps",
               f"grad/b{b}/dW"], colocate=w)
    _node(g, "train", "NoOp", [f"^train/update_b{b}" for b in range(blocks)], dtype=None)
    return g


def synth_run_metadata(graph_def, step):
    meta = config_pb2.RunMetadata()
    dev = meta.step_stats.dev_stats.add(device="/job:localhost/replica:0/task:0/device:CPU:0")
    for i, node in enumerate(graph_def.node):
        ns = dev.node_stats.add(node_name=node.name, all_end_rel_nanos=1000 + (i * 7919 + step * 104729) % 50000)
        if node.op not in ("NoOp", "ResourceApplyAdam"):
            out = ns.output.add(slot=0)
            out.tensor_description.allocation_description.requested_bytes = 4 * BATCH * WIDTH
    return meta


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=200_000)
    parser.add_argument("--steps", type=int, default=5)
    args = parser.parse_args()
    print_commit()
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        graph_def = synth_graph(max(1, args.nodes // NODES_PER_BLOCK))
        with open(os.path.join(tmp, "graph.pb"), "wb") as f:
            f.write(graph_def.SerializeToString())
        for step in range(args.steps):
            with open(os.path.join(tmp, f"run_metadata_{step}.pb"), "wb") as f:
                f.write(synth_run_metadata(graph_def, step).SerializeToString())
        size = sum(os.path.getsize(os.path.join(tmp, p)) for p in os.listdir(tmp))
        print(f"generated {len(graph_def.node)} nodes, {args.steps} steps, {size / 2**20:.1f} MiB "
              f"in {time.perf_counter() - t0:.1f} s")
        t1 = time.perf_counter()
        graph, info = load_profile(tmp)
        print(f"load_profile: {graph.num_nodes} nodes, {graph.num_edges} edges, {graph.num_groups} groups "
              f"in {time.perf_counter() - t1:.2f} s")
        print("  by stage: " + ", ".join(f"{k} {v:.2f} s" for k, v in info["stage_seconds"].items()))


if __name__ == "__main__":
    main()

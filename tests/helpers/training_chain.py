"""A hand-made training chain (forward ops, a loss, backward ops that read the saved
activations) and the memory that binds it, for the portfolio's and the determinism
tests."""

import numpy as np

from pardnn.pipeline.report import evaluate
from pardnn.graph import CostGraph
from pardnn.hardware import parse_devices

MB = 1_000_000


def training_chain(layers=6, act=MB, grad=MB, comp=10.0):
    """input -> f0 .. f{L-1} -> loss -> b{L-1} .. b0, where b_i reads f_i's input (the saved
    activation) and the gradient from b_{i+1}. Every tensor is `act` bytes."""
    names = ["input"] + [f"f{i}" for i in range(layers)] + ["loss"] + \
        [f"b{i}" for i in reversed(range(layers))]
    src, dst, nbytes = [], [], []

    def edge(u, v, b):
        src.append(u), dst.append(v), nbytes.append(b)

    prev = "input"
    for i in range(layers):
        edge(prev, f"f{i}", act)
        prev = f"f{i}"
    edge(prev, "loss", act)
    up = "loss"
    for i in reversed(range(layers)):
        edge(up, f"b{i}", grad)
        edge("input" if i == 0 else f"f{i - 1}", f"b{i}", act)     # the saved activation
        up = f"b{i}"
    n = len(names)
    return CostGraph.build(names, comp_us=[comp] * n, out_bytes=[act] * n,
                           edge_src=src, edge_dst=dst, edge_bytes=nbytes)


def one_device_peak(graph):
    one = parse_devices("cpu:1").with_options(memory=2**50)
    return evaluate(graph, one, np.zeros(graph.num_nodes, np.int32)).peak_memory_bytes[0]


def cluster_at(graph, k, fraction):
    return parse_devices(f"cpu:{k}").with_options(memory=int(fraction * one_device_peak(graph)),
                                                  reserve=0.0)

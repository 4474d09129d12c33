"""Weights fetched from the host just before their layer (issue 51; pardnn.graph.host_fetch,
pardnn.pipeline.host_fetch), on a hand-made chain of layers whose weights live on the
host: under FIFO every read runs at the step's start and every weight's copy stays on
the GPU from its forward MatMul to its backward one; with the lever one weight at a time
crosses, once for each pass."""

import numpy as np
import pytest

from pardnn.emulator.memory import track_memory
from pardnn.emulator.scheduler import simulate
from pardnn.graph import NORMAL, REFERENCE, RESIDUAL, CostGraph
from pardnn.graph.host_fetch import fetch_order, weight_reads, with_refetch
from pardnn.graph.order import with_order
from pardnn.graph.recompute import copy_name
from pardnn.hardware import Cluster, Device
from pardnn.pipeline.host_fetch import host_fetch, on_refetched

W, A, L = 1000, 10, 4       # a weight's bytes, an activation's, the layers
BW = 10.0                   # bytes per us: a weight crosses in 100 us, a MatMul takes 10


def gpu_and_host():
    """One GPU and a host of the same speed, every link BW bytes/us and 5 us."""
    devices = (Device("/device:GPU:0", "GPU", 1 << 40),
               Device("/device:CPU:0", "CPU", 1 << 40, compute_rate=1.0, memory_rate=1.0, host_tier=True))
    lat, bw = np.array([[0.0, 5.0], [5.0, 0.0]]), np.array([[np.inf, BW], [BW, np.inf]])
    return Cluster(devices, lat, bw)


def layers(n=L):
    """x -> n MatMul layers -> loss, and the backward: per layer dX (reads the weight)
    and dW (sent to the host's Adam update, which TF orders after the read)."""
    nodes, edges = [], []

    def node(name, op, out=0, kind=NORMAL, persist=0, us=10.0, group=None):
        nodes.append((name, op, out, kind, persist, us, group or name))

    def edge(src, dst, nbytes, slot=0):
        edges.append((src, dst, nbytes, slot))
    node("x", "Placeholder", A, us=1.0)
    for i in range(1, n + 1):
        g = f"var{i}"
        node(f"v{i}", "VarHandleOp", kind=RESIDUAL, persist=W, us=1.0, group=g)
        node(f"r{i}", "ReadVariableOp", kind=REFERENCE, us=1.0, group=g)
        node(f"f{i}", "MatMul", A)
        node(f"gradient_tape/dX{i}", "MatMul", A)
        node(f"gradient_tape/dW{i}", "MatMul", W)
        node(f"ResourceApplyAdam_{i}", "ResourceApplyAdam", kind=REFERENCE, us=1.0, group=g)
        edge(f"v{i}", f"r{i}", 0)
        edge("x" if i == 1 else f"f{i - 1}", f"f{i}", A)
        edge(f"r{i}", f"f{i}", W)
        edge(f"r{i}", f"gradient_tape/dX{i}", W)
        edge("x" if i == 1 else f"f{i - 1}", f"gradient_tape/dW{i}", A)
        edge(f"v{i}", f"ResourceApplyAdam_{i}", 0)
        edge(f"gradient_tape/dW{i}", f"ResourceApplyAdam_{i}", W)
        edge(f"r{i}", f"ResourceApplyAdam_{i}", 0, -1)
    node("loss", "Sum", A)
    edge(f"f{n}", "loss", A)
    for i in range(n, 0, -1):
        dy = "loss" if i == n else f"gradient_tape/dX{i + 1}"
        edge(dy, f"gradient_tape/dX{i}", A)
        edge(dy, f"gradient_tape/dW{i}", A)
    names, ops, out, kind, persist, us, group = map(list, zip(*nodes))
    src, dst, nbytes, slot = map(list, zip(*edges))
    return CostGraph.build(names, ops, us, out, persist, kind, group, edge_src=src, edge_dst=dst,
                           edge_bytes=nbytes, edge_slot=slot)


def on_host(graph):
    """The device per node: each variable's group on the host (1), the rest on the GPU."""
    return np.array([1 if graph.ops[i] in ("VarHandleOp", "ReadVariableOp", "ResourceApplyAdam")
                     else 0 for i in range(graph.num_nodes)], np.int64)


def gpu_peak(graph, cluster=None):
    cluster = cluster or gpu_and_host()
    device = on_host(graph)
    schedule = simulate(graph, cluster, device)
    return int(track_memory(graph, cluster, device, schedule).peak_bytes[0]), schedule


def names_of(graph, order):
    return [(graph.names[b], graph.names[a]) for b, a in zip(order.before.tolist(), order.after.tolist())]


def test_fifo_holds_every_weight_on_the_gpu_at_the_turn():
    g = layers()
    peak, schedule = gpu_peak(g)
    reads = [g.index()[f"r{i}"] for i in range(1, L + 1)]
    assert schedule.start[reads].max() < W / BW         # every read before the first weight lands
    assert peak >= L * W


def test_refetch_gives_the_backward_a_second_read_ordered_before_the_update():
    g = layers()
    index = g.index()
    late = np.array(["gradient_tape/" in n or n.startswith("ResourceApplyAdam") for n in g.names], bool)
    new, done = with_refetch(g, weight_reads(g, min_bytes=W), late)
    assert len(done.copies) == L and new.num_nodes == g.num_nodes + L
    i = new.index()
    pairs = set(zip(new.edge_src.tolist(), new.edge_dst.tolist(), new.edge_slot.tolist()))
    for k in range(1, L + 1):
        c = i[copy_name(f"r{k}")]
        assert new.kind[c] == REFERENCE and new.group[c] == new.group[i[f"v{k}"]]
        assert (i[f"v{k}"], c, 0) in pairs                                  # reads the variable
        assert (c, i[f"gradient_tape/dX{k}"], 0) in pairs                   # dX reads it
        assert (i[f"r{k}"], i[f"gradient_tape/dX{k}"], 0) not in pairs      # not the forward read
        assert (i[f"r{k}"], i[f"f{k}"], 0) in pairs
        assert (c, i[f"ResourceApplyAdam_{k}"], -1) in pairs                # the update waits for it
    assert done.new_id.tolist() == [i[n] for n in g.names] and len(index) == g.num_nodes


def test_fetch_order_chains_the_reads_by_their_first_readers_start():
    lever = host_fetch(layers(), depth=1, min_bytes=W)
    got = names_of(lever.refetched, lever.order)
    forward = [(f"f{k}", f"r{k + 1}") for k in range(1, L)]
    backward = [(f"f{L}", copy_name(f"r{L}"))] + [
        (f"gradient_tape/dX{k + 1}", copy_name(f"r{k}")) for k in range(L - 1, 0, -1)]
    assert got == forward + backward
    two = names_of(host_fetch(layers(), depth=2, min_bytes=W).refetched, host_fetch(layers(), depth=2,
                                                                                     min_bytes=W).order)
    assert two[:2] == [("f1", "r3"), ("f2", "r4")] and len(two) == 2 * L - 2


@pytest.mark.parametrize("n", [4, 8])
def test_the_lever_brings_the_gpu_peak_to_one_weight_in_each_direction(n):
    """FIFO: at the loss, every weight's copy and n + 2 activations (x, the n layers'
    outputs, the loss's). Depth 1: weight k crosses after layer k - 1's MatMul freed
    weight k - 1, so one copy at a time in each pass; the peak is in the backward, one
    weight's copy beside the one gradient being sent back (dW, W bytes, held until it
    lands) and n + 1 activations."""
    fifo, _ = gpu_peak(layers(n))
    assert fifo == n * W + (n + 2) * A
    for depth in (1, 2):
        peak, _ = gpu_peak(host_fetch(layers(n), depth=depth, min_bytes=W).graph)
        assert peak == 2 * W + (n + 1) * A


def test_no_pair_waits_for_a_reader_of_its_own_read():
    g = layers(2)
    reads = weight_reads(g, min_bytes=W)
    both = g.index()["f1"]
    start = np.zeros(g.num_nodes)
    # one op reading both weights first: the pair (its read, the other read) is dropped
    src, dst = g.edge_src.tolist() + [int(reads[1])], g.edge_dst.tolist() + [both]
    h = CostGraph.build(g.names, g.ops, g.comp_us, g.out_bytes, g.persist_bytes, g.kind, g.group.tolist(),
                        edge_src=src, edge_dst=dst, edge_bytes=g.edge_bytes.tolist() + [W],
                        edge_slot=g.edge_slot.tolist() + [1])
    assert len(fetch_order(h, weight_reads(h, min_bytes=W), start, depth=1)) == 0


def test_weight_reads_leave_small_reads_to_fifo():
    g = layers()
    assert len(weight_reads(g, min_bytes=W)) == L and len(weight_reads(g, min_bytes=W + 1)) == 0


def test_a_placement_of_the_lever_carries_its_order_on_the_refetched_graph():
    from pardnn.io.placement import Placement
    lever = host_fetch(layers(), depth=1, min_bytes=W)
    cluster = gpu_and_host()
    placement = Placement(on_host(lever.graph), cluster, "pardnn")
    carried = on_refetched(lever, placement)
    assert carried.schedule_name == "host-fetch" and len(carried.order) == len(lever.order)
    assert np.array_equal(np.asarray(carried.device), on_host(lever.refetched))
    again, _ = with_order(lever.refetched, carried.order)
    assert again.names == lever.graph.names


def test_a_graph_without_large_reads_is_left_as_it_is():
    g = layers()
    lever = host_fetch(g, min_bytes=W + 1)
    assert len(lever.order) == 0 and len(lever.refetch.copies) == 0
    assert lever.graph.names == g.names and np.array_equal(lever.graph.edge_src, g.edge_src)

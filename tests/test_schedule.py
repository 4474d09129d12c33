"""Orders of a micro-batched step (pardnn.pipeline.schedule) and the control edges
that carry them (pardnn.graph.order), on hand-made pipelines whose right order is
known: the emulated list schedule, made binding as per-device chains, emulates the
same under TF's FIFO; an order that closes a cycle is refused."""

import numpy as np
import pytest

from pardnn.base.errors import GraphError
from pardnn.emulator.scheduler import simulate
from pardnn.graph import CostGraph
from pardnn.graph.order import Order, device_chains, order_rows, read_order_rows, step_mask, with_order
from pardnn.hardware import parse_devices
from pardnn.pipeline.schedule import SCHEDULES, choose, micro_batch_of, ranks, schedules, weight_gradients


def pipeline(m, stages, fwd=10.0, bwd=20.0, act=1000):
    """M micro-batches through `stages` stages, stage s on device s: forward ops
    micro_batch_i/f<s>, backward ops micro_batch_i/gradients/b<s> (reversed), each
    micro-batch's activation of stage s held until its backward; one shared update."""
    names, comp, out, src, dst = [], [], [], [], []
    device = []

    def node(name, t, nbytes, d):
        names.append(name), comp.append(t), out.append(nbytes), device.append(d)
        return len(names) - 1
    update = None
    last_grads = []
    for i in range(m):
        f = [node(f"micro_batch_{i}/f{s}", fwd, act, s) for s in range(stages)]
        b = [node(f"micro_batch_{i}/gradients/b{s}", bwd, 8, s) for s in range(stages)]
        for s in range(stages - 1):
            src.append(f[s]), dst.append(f[s + 1])
            src.append(b[s + 1]), dst.append(b[s])
        src.append(f[-1]), dst.append(b[-1])
        for s in range(stages):
            src.append(f[s]), dst.append(b[s])          # the activation its backward reads
        last_grads.append(b[0])
    update = node("update", 1.0, 8, 0)
    for g in last_grads:
        src.append(g), dst.append(update)
    graph = CostGraph.build(names, comp_us=comp, out_bytes=out, edge_src=src, edge_dst=dst,
                            edge_bytes=[8] * len(src))
    index = graph.index()
    placed = np.empty(graph.num_nodes, np.int64)
    placed[[index[nm] for nm in names]] = device
    return graph, placed


def cluster(k, memory=2**40):
    return parse_devices(f"cpu:{k}").with_options(memory=memory, reserve=0.0)


def test_micro_batches_are_read_from_names():
    graph, _ = pipeline(3, 2)
    micro = micro_batch_of(graph)
    assert sorted(set(micro.tolist())) == [-1, 0, 1, 2]
    assert micro[graph.index()["update"]] == -1


def test_every_order_is_a_permutation_of_ranks_or_fifo():
    graph, _ = pipeline(4, 3)
    assert ranks(graph, "fifo") is None
    for name in SCHEDULES[1:]:
        r = ranks(graph, name)
        assert len(set(r.tolist())) == graph.num_nodes
    with pytest.raises(ValueError):
        ranks(graph, "nonsense")


@pytest.mark.parametrize("m, k", [(2, 2), (4, 2), (4, 4), (8, 4)])
def test_each_order_carried_as_device_chains_emulates_the_same_under_fifo(m, k):
    graph, device = pipeline(m, k)
    for s in schedules(graph, cluster(k), device):
        ordered, renumber = with_order(graph, s.order)
        new_device = np.empty(graph.num_nodes, np.int64)
        new_device[renumber] = device
        again = simulate(ordered, cluster(k), new_device)
        assert again.makespan == pytest.approx(s.makespan_us), s.name
        assert 0.0 <= s.bubble < 1.0


def test_early_micro_batch_holds_fewer_activations_than_fifo():
    """1F1B's point: with 8 micro-batches on 2 stages, finishing each micro-batch
    first frees its activations sooner than GPipe's all-forward-first."""
    graph, device = pipeline(8, 2, fwd=10.0, bwd=10.0)
    by_name = {s.name: s for s in schedules(graph, cluster(2), device)}
    assert by_name["early-micro-batch"].peak_bytes.max() < by_name["forward-first"].peak_bytes.max()


def test_choose_keeps_the_fastest_that_fits_and_fifo_on_ties():
    graph, device = pipeline(8, 2, fwd=10.0, bwd=10.0)
    scheduled = schedules(graph, cluster(2), device)
    best = choose(scheduled)
    assert best.fits and best.makespan_us == min(s.makespan_us for s in scheduled if s.fits)
    tied = [s._replace(makespan_us=1.0) for s in scheduled]
    assert choose(tied).name == "fifo"
    least = min(s.peak_bytes.max() for s in scheduled)
    tight = schedules(graph, cluster(2, memory=int(least)), device)
    assert choose(tight).peak_bytes.max() == least


def test_device_chains_follow_the_starts_and_skip_existing_edges():
    graph = CostGraph.build(["a", "b", "c"], comp_us=[1.0, 1.0, 1.0], edge_src=["a"], edge_dst=["b"])
    order = device_chains(graph, [0, 0, 0], [0.0, 1.0, 2.0])
    assert order_rows(graph, order) == [("b", "c")]                 # a -> b is an edge already
    assert order_rows(graph, read_order_rows(graph, [("b", "c")])) == [("b", "c")]
    with pytest.raises(GraphError, match="'x'"):
        read_order_rows(graph, [("b", "x")], "order.csv")


def test_an_order_that_closes_a_cycle_is_refused():
    graph = CostGraph.build(["a", "b"], comp_us=[1.0, 1.0], edge_src=["a"], edge_dst=["b"])
    with pytest.raises(GraphError, match="deadlock"):
        with_order(graph, Order(np.array([1]), np.array([0])))
    with pytest.raises(GraphError, match="outside"):
        with_order(graph, Order(np.array([0]), np.array([5])))


def test_the_step_is_what_the_fetches_need_and_the_initialiser_does_not():
    graph = CostGraph.build(["var", "init_value", "init", "x", "read", "loss", "train"],
                            edge_src=["init_value", "var", "var", "x", "read", "loss", "var"],
                            edge_dst=["init", "init", "read", "loss", "loss", "train", "train"])
    inside = step_mask(graph, ["train", "loss:0"], ["init"])
    assert {graph.names[i] for i in np.flatnonzero(inside)} == {"x", "read", "loss", "train"}
    assert step_mask(graph, ["not_a_node"]).all()


def test_on_one_device_every_order_ties_with_fifo_and_fifo_is_kept():
    graph, _ = pipeline(4, 3)
    scheduled = schedules(graph, cluster(1), np.zeros(graph.num_nodes, np.int64))
    assert max(s.makespan_us for s in scheduled) == pytest.approx(min(s.makespan_us for s in scheduled))
    assert choose(scheduled).name == "fifo"
    nudged = [scheduled[0]] + [s._replace(makespan_us=scheduled[0].makespan_us * (1 - 1e-12)) for s in scheduled[1:]]
    assert choose(nudged).name == "fifo"                  # a rounding's gain is no gain


def split_backward(m, stages, fwd=10.0, bwd=10.0, wgrad=10.0):
    """`pipeline`'s step with each stage's backward split as TF's gradient graphs hold
    it: an input gradient micro_batch_i/gradients/b<s>, which the previous stage's
    backward reads, and a weight gradient micro_batch_i/gradients/w<s>, which reads the
    stage's activation and the output gradient and only the update reads (Zero
    Bubble's B and W). Returns (graph, device, names of the weight gradients)."""
    names, comp, src, dst, device = [], [], [], [], []

    def node(name, t, d):
        names.append(name), comp.append(t), device.append(d)
        return len(names) - 1
    wgrads = []
    for i in range(m):
        f = [node(f"micro_batch_{i}/f{s}", fwd, s) for s in range(stages)]
        b = [node(f"micro_batch_{i}/gradients/b{s}", bwd, s) for s in range(stages)]
        w = [node(f"micro_batch_{i}/gradients/w{s}", wgrad, s) for s in range(stages)]
        for s in range(stages - 1):
            src += [f[s], b[s + 1]]
            dst += [f[s + 1], b[s]]
        src.append(f[-1]), dst.append(b[-1])
        for s in range(stages):
            src += [f[s], b[s]] if s == stages - 1 else [f[s], b[s + 1]]
            dst += [w[s], w[s]]
            src.append(f[s]), dst.append(b[s])
        wgrads += [names[x] for x in w]
    update = node("update", 1.0, 0)
    src += [names.index(nm) for nm in wgrads]
    dst += [update] * len(wgrads)
    graph = CostGraph.build(names, comp_us=comp, out_bytes=[64] * len(names), edge_src=src, edge_dst=dst,
                            edge_bytes=[8] * len(src))
    index = graph.index()
    placed = np.empty(graph.num_nodes, np.int64)
    placed[[index[nm] for nm in names]] = device
    return graph, placed, wgrads


def test_weight_gradients_are_the_backward_ops_only_the_update_waits_for():
    """The first stage's input gradient, which nothing reads, is deferrable too."""
    graph, _, wgrads = split_backward(3, 4)
    found = {graph.names[i] for i in np.flatnonzero(weight_gradients(graph))}
    assert found == set(wgrads) | {f"micro_batch_{i}/gradients/b0" for i in range(3)}


def test_weights_last_fills_the_bubble_that_1f1b_leaves():
    """Zero Bubble's point, on 4 stages and 4 micro-batches: deferring each weight
    gradient until its device is idle shortens the step that 1F1B's order gives, and
    no order is shorter."""
    graph, device, _ = split_backward(4, 4)
    by_name = {s.name: s.makespan_us for s in schedules(graph, cluster(4), device)}
    assert by_name["weights-last"] < by_name["early-micro-batch"]
    assert by_name["weights-last"] == min(by_name.values())

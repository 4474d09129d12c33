"""Orders that lower the peak (pardnn.graph.memory_orders) and the order lever of the
placement (pardnn.pipeline.order_lever, used by pardnn.pipeline.capacity), on a hand-made
backward pass through time: `steps` timesteps of a chain, each making one 100-byte
gradient per weight, summed per weight by an AddN of one input per timestep. FIFO runs
every gradient as soon as its timestep is done, so all of them are alive when the
first sum can run; summed one after another, one weight's are."""

import numpy as np

from pardnn.emulator.memory import track_memory
from pardnn.emulator.scheduler import simulate
from pardnn.graph.costgraph import CostGraph
from pardnn.graph.memory_orders import big_sums, proposals, sum_order, update_order
from pardnn.graph.order import with_order
from pardnn.hardware import parse_devices
from pardnn.io.placement import Placement
from pardnn.pipeline.capacity import Feasibility, count_row
from pardnn.pipeline.order_lever import on_graph, order_lever, ordered_graphs
from pardnn.repair.least_memory import least_memory

GRAD, SUM = 100, 10


def rnn_grads(weights=3, steps=4, shared=False):
    """The graph of the module docstring; `shared`: one more gradient feeds every sum."""
    names, ops, comp, out, src, dst = [], [], [], [], [], []

    def node(name, op, us, nbytes, inputs=()):
        names.append(name), ops.append(op), comp.append(us), out.append(nbytes)
        src.extend(inputs), dst.extend([name] * len(inputs))
    for t in range(steps, 0, -1):
        node(f"h{t}", "MatMul", 10.0, 0, [f"h{t + 1}"] if t < steps else [])
        for w in range(weights):
            node(f"g{w}_{t}", "MatMul", 1.0, GRAD, [f"h{t}"])
    if shared:
        node("common", "MatMul", 1.0, GRAD, ["h1"])
    for w in range(weights):
        node(f"sum{w}", "AddN", 1.0, SUM, [f"g{w}_{t}" for t in range(1, steps + 1)] + (["common"] if shared else []))
        node(f"apply{w}", "ResourceApplyAdam", 1.0, 0, [f"sum{w}"])
    return CostGraph.build(names, ops=ops, comp_us=comp, out_bytes=out, edge_src=src, edge_dst=dst,
                           edge_bytes=[out[names.index(s)] for s in src])


def fifo_start(graph):
    """Start per node of the step on one device in TF's order: what the proposals follow."""
    one = parse_devices("cpu:1")
    return simulate(graph, one, np.zeros(graph.num_nodes, np.int32)).start


def one_device_peak(graph):
    one = parse_devices("cpu:1").with_options(memory=10**9)
    device = np.zeros(graph.num_nodes, np.int32)
    return int(track_memory(graph, one, device, simulate(graph, one, device)).peak_bytes[0])


def pairs(graph, order):
    return [(graph.names[b], graph.names[a]) for b, a in zip(order.before.tolist(), order.after.tolist())]


def test_fifo_piles_up_every_gradient_and_the_sum_order_one_weights():
    graph = rnn_grads(weights=3, steps=4)
    assert one_device_peak(graph) == 3 * 4 * GRAD + SUM         # all twelve, and the first sum's output
    order = sum_order(graph, fifo_start(graph))
    assert sorted(pairs(graph, order)) == sorted([("sum0", f"g1_{t}") for t in range(1, 5)]
                                                 + [("sum1", f"g2_{t}") for t in range(1, 5)])
    ordered, ids = with_order(graph, order)
    assert one_device_peak(ordered) == 4 * GRAD + SUM            # one sum's inputs and output: the least possible
    assert [graph.names[i] for i in big_sums(graph)] == ["sum0", "sum1", "sum2"]
    assert [ordered.names[i] for i in ids] == list(graph.names)


def test_the_sum_order_leaves_out_an_edge_that_would_close_a_cycle():
    graph = rnn_grads(weights=2, steps=4, shared=True)      # `common` feeds sum0: sum0 -> common is a cycle
    assert sorted(pairs(graph, sum_order(graph, fifo_start(graph)))) == [("sum0", f"g1_{t}") for t in range(1, 5)]
    with_order(graph, sum_order(graph, fifo_start(graph)))                     # no cycle: applies


def test_small_sums_are_not_ordered():
    graph = rnn_grads(weights=3, steps=3)                   # sums of three inputs, below SUM_INPUTS
    assert len(sum_order(graph, fifo_start(graph))) == 0 and len(sum_order(graph, fifo_start(graph), inputs=3)) == 2 * 3
    [(name, order)] = proposals(graph, fifo_start(graph))                      # the updates' order only
    assert name == "sum-and-update-order" and pairs(graph, order) == [("apply0", "sum1"), ("apply1", "sum2")]


def clipped_updates(weights=3):
    """Gradients of 100 bytes, their global norm, each clipped into 200 bytes (a cast
    up, say) and read by a slow update: FIFO clips them all before the first update."""
    names = ["loss"] + [f"g{w}" for w in range(weights)] + ["norm"]
    names += [f"clip{w}" for w in range(weights)] + [f"apply{w}" for w in range(weights)]
    ops = ["Mul"] * (weights + 2) + ["Cast"] * weights + ["ResourceApplyAdam"] * weights
    out = [0] + [GRAD] * weights + [0] + [2 * GRAD] * weights + [0] * weights
    comp = [1.0] * (2 * weights + 2) + [10.0] * weights
    edges = [("loss", f"g{w}") for w in range(weights)] + [(f"g{w}", "norm") for w in range(weights)]
    edges += [(f"g{w}", f"clip{w}") for w in range(weights)] + [("norm", f"clip{w}") for w in range(weights)]
    edges += [(f"clip{w}", f"apply{w}") for w in range(weights)]
    return CostGraph.build(names, ops=ops, comp_us=comp, out_bytes=out, edge_src=[e[0] for e in edges],
                           edge_dst=[e[1] for e in edges], edge_bytes=[out[names.index(e[0])] for e in edges])


def test_the_update_order_clips_each_gradient_just_before_its_update():
    graph = clipped_updates(weights=3)
    assert one_device_peak(graph) == GRAD + 3 * 2 * GRAD          # the last gradient and every clipped one
    order = update_order(graph, fifo_start(graph))
    assert pairs(graph, order) == [("apply0", "clip1"), ("apply1", "clip2")]
    ordered, _ = with_order(graph, order)
    assert one_device_peak(ordered) == 3 * GRAD + 2 * GRAD        # every gradient and the first clipped one
    [(name, same)] = proposals(graph, fifo_start(graph))
    assert name == "sum-and-update-order" and pairs(graph, same) == pairs(graph, order)


def test_capacity_fits_lower_with_the_order_and_carries_it():
    graph = rnn_grads(weights=4, steps=4)
    cluster = parse_devices("cpu:2").with_options(memory=10**6, reserve=0.0)
    bound = least_memory(graph, 2).bytes
    assert bound == 4 * GRAD + SUM
    plain = count_row(graph, cluster, "pardnn", orders=False)
    row = count_row(graph, cluster, "pardnn")
    assert plain.least.memory >= 2 * 4 * GRAD and plain.least.placement.order is None
    assert bound <= row.least.memory <= 1.02 * bound               # within NEAR_BOUND of the bound
    placement = row.least.placement
    assert placement.schedule_name == "sum-order" and len(placement.order) == 12
    assert max(row.least.report.peak_memory_bytes) <= row.least.memory
    assert list(placement.profile.peak_bytes) == row.least.report.peak_memory_bytes   # its emulation, on the graph
    assert row.fields(1.0)["order_at_least_memory"] == "sum-order"
    ordered, ids = with_order(graph, placement.order)           # its device per node of the graph as given
    device = np.empty(graph.num_nodes, np.int32)
    device[ids] = placement.device
    at = cluster.with_options(memory=row.least.memory)
    assert np.all(track_memory(ordered, at, device, simulate(ordered, at, device)).peak_bytes <= at.capacity)


def test_a_memory_that_fits_as_is_never_tries_an_order():
    graph = rnn_grads(weights=4, steps=4)
    cluster = parse_devices("cpu:2").with_options(memory=10**6, reserve=0.0)
    plain, row = count_row(graph, cluster, "pardnn", orders=False), count_row(graph, cluster, "pardnn")
    assert np.array_equal(plain.at_memory.placement.device, row.at_memory.placement.device)
    assert row.at_memory.placement.order is None
    check = Feasibility(graph, cluster, "pardnn", orders=True)
    assert check.fits(10**6) and check._ordered is None


def test_the_order_lever_places_the_ordered_graph_and_maps_it_back():
    graph = rnn_grads(weights=4, steps=4)
    cluster = parse_devices("cpu:2").with_options(memory=4 * GRAD + SUM + 8, reserve=0.0)
    ordered = ordered_graphs(graph)[0]                       # sum-order, then sum-and-update-order
    found = order_lever(graph, cluster)
    assert found is not None and found[0].name == "sum-order"
    judged = found[1].judged
    placement = on_graph(graph, ordered, Placement(judged.device, cluster, "pardnn", schedule=judged.schedule))
    assert np.array_equal(placement.device, judged.device[ordered.ids])
    assert placement.order is ordered.order and placement.schedule_name == "sum-order"
    ordered_step = simulate(ordered.graph, cluster, judged.device)     # its emulation, by the graph's ids
    assert np.array_equal(placement.schedule.start, ordered_step.start[ordered.ids])
    as_ordered = track_memory(ordered.graph, cluster, judged.device, ordered_step)
    assert np.array_equal(placement.profile.peak_bytes, as_ordered.peak_bytes)
    assert np.all(placement.profile.peak_bytes <= cluster.capacity)
    assert order_lever(graph, cluster.with_options(memory=4 * GRAD)) is None     # below the bound: none fits


def test_the_memory_order_switch_of_place(tmp_path, capsys):
    """`pardnn place --memory-order`: auto pulls the order only where nothing fits
    without it, on carries it where the step fits anyway, off never does (and the
    tight memory is then refused for memory); on for a graph whose FIFO piles nothing
    up is one line, exit 2."""
    import json

    from pardnn.cli import main
    path = tmp_path / "rnn.json"
    rnn_grads(weights=4, steps=4).to_json(str(path))
    tight = ["--devices", "cpu:2", "--memory", str(4 * GRAD + SUM + 8), "--reserve", "0"]
    roomy = ["--devices", "cpu:2", "--memory", "1MB", "--reserve", "0"]

    def placed(flags, out):
        code = main(["place", str(path), *flags, "-o", str(tmp_path / out)])
        report = tmp_path / out / "report.json"
        return code, json.loads(report.read_text()) if report.exists() else None
    code, report = placed(tight, "auto")
    assert code == 0 and report["memory_order"]["name"] == "sum-order"
    assert (tmp_path / "auto" / "order.csv").exists()
    code, report = placed(roomy, "roomy")
    assert code == 0 and "memory_order" not in report
    code, report = placed([*roomy, "--memory-order", "on"], "on")
    assert code == 0 and report["memory_order"]["name"] == "sum-order" and report["memory_order"]["control_edges"] > 0
    capsys.readouterr()
    code, report = placed([*tight, "--memory-order", "off"], "off")
    assert code == 2 and report is None and "memory:" in capsys.readouterr().err
    chain = tmp_path / "chain.json"
    CostGraph.build(["a", "b"], comp_us=[1, 1], out_bytes=[8, 8], edge_src=["a"], edge_dst=["b"],
                    edge_bytes=[8]).to_json(str(chain))
    assert main(["place", str(chain), *roomy, "--memory-order", "on", "-o", str(tmp_path / "c")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--memory-order on: no order lowers this graph's peak" in err


def test_capacity_memory_order_off_finds_the_least_memory_without_it(tmp_path):
    import json

    from pardnn.cli import main
    path = tmp_path / "rnn.json"
    rnn_grads(weights=4, steps=4).to_json(str(path))
    flags = ["--devices", "cpu:2", "--memory", "1MB", "--reserve", "0", "--counts", "2"]
    assert main(["capacity", str(path), *flags, "-o", str(tmp_path / "auto")]) == 0
    assert main(["capacity", str(path), *flags, "--memory-order", "off", "-o", str(tmp_path / "off")]) == 0
    auto, off = (json.loads((tmp_path / d / "capacity.json").read_text())["rows"][0] for d in ("auto", "off"))
    assert auto["order_at_least_memory"] == "sum-order" and "order_at_least_memory" not in off
    assert auto["least_memory_bytes"] < off["least_memory_bytes"]

"""`--replicas R` on the cost graph: what is averaged, the replicated graph, the
step-time estimate, and bad requests (no TensorFlow)."""

import json

import numpy as np
import pytest

from pardnn.graph import averaging
from pardnn.hardware import hosts
from pardnn.pipeline import replicas
from pardnn.cli import main
from pardnn.hardware import parse_devices
from pardnn.base.errors import UserError
from pardnn.graph import CostGraph


def training_step():
    """x -> f -> g (the gradient) -> apply <- w, lr; a moving average `ema` whose
    delta depends on x; a step counter that does not; a control edge from the data.
    Variables share a colocation group with their updates."""
    nodes = {"x": ("Placeholder", 0), "w": ("VariableV2", 0), "lr": ("Const", 0),
             "f": ("MatMul", 10), "g": ("MatMul", 5), "apply": ("ApplyGradientDescent", 1),
             "m": ("VariableV2", 0), "delta": ("Sub", 1), "ema": ("AssignSub", 1),
             "step": ("VarHandleOp", 0), "one": ("Const", 0), "count": ("AssignAddVariableOp", 1)}
    edges = [("x", "f", 1000, 0), ("w", "f", 400, 0), ("f", "g", 1000, 0), ("g", "apply", 1000, 0),
             ("w", "apply", 400, 0), ("lr", "apply", 4, 0), ("f", "delta", 1000, 0), ("m", "delta", 400, 0),
             ("delta", "ema", 400, 0), ("m", "ema", 400, 0), ("step", "count", 8, 0),
             ("one", "count", 8, 0), ("x", "count", 0, -1)]
    src, dst, nbytes, slot = zip(*edges)
    group = {"apply": "w", "ema": "m", "count": "step"}
    return CostGraph.build(names=list(nodes), ops=[v[0] for v in nodes.values()],
                           comp_us=[v[1] for v in nodes.values()], edge_src=list(src), edge_dst=list(dst),
                           edge_bytes=list(nbytes), edge_slot=list(slot),
                           group=[group.get(name, name) for name in nodes])


def names_of(graph, ids):
    return sorted(graph.names[i] for i in ids)


def test_data_dependent_inputs_of_updates_are_averaged():
    g = training_step()
    dep = averaging.data_dependent(g)
    assert names_of(g, np.flatnonzero(dep)) == ["apply", "delta", "ema", "f", "g", "x"]
    a = averaging.averaged_tensors(g)
    tensors = {g.names[s]: (int(k), int(b)) for s, k, b in zip(a.src, a.slot, a.nbytes)}
    assert tensors == {"g": (0, 1000), "delta": (0, 400)}        # not lr, w, m, one, step
    assert names_of(g, g.edge_dst[a.edges]) == ["apply", "ema"]
    assert {averaging.mean_name(g, a, k) for k in range(2)} == {"allreduce/g/0", "allreduce/delta/0"}


def test_what_a_checkpoint_restores_is_not_averaged():
    """A Saver's file name is a PlaceholderWithDefault; the values its RestoreV2 reads
    come from the file, not the batch, so their Assigns average nothing."""
    nodes = {"save/filename": "PlaceholderWithDefault", "save/names": "Const", "save/RestoreV2": "RestoreV2",
             "w": "VarHandleOp", "save/AssignVariableOp": "AssignVariableOp"}
    edges = [("save/filename", "save/RestoreV2", 0), ("save/names", "save/RestoreV2", 1),
             ("save/RestoreV2", "save/AssignVariableOp", 1), ("w", "save/AssignVariableOp", 0)]
    src, dst, slot = zip(*edges)
    g = CostGraph.build(names=list(nodes), ops=list(nodes.values()), edge_src=list(src), edge_dst=list(dst),
                        edge_bytes=[8] * len(edges), edge_slot=list(slot))
    assert names_of(g, np.flatnonzero(averaging.data_dependent(g))) == ["save/filename"]
    assert averaging.averaged_tensors(g).num_tensors == 0


def test_replicated_graph_reads_one_mean_per_tensor():
    g = training_step()
    a = averaging.averaged_tensors(g)
    table = hosts.replica_devices(parse_devices("2xcpu:1"), 2)
    rep, device = replicas.replicated_graph(g, a, np.zeros(g.num_nodes, np.int32), table)
    assert rep.num_nodes == 2 * g.num_nodes + 2 and rep.num_groups == 2 * g.num_groups + 2
    index = rep.index()
    mean = index["allreduce/g/0"]
    assert sorted(rep.names[i] for i in rep.predecessors(mean)) == ["replica_0/g", "replica_1/g"]
    assert sorted(rep.names[i] for i in rep.successors(mean)) == ["replica_0/apply", "replica_1/apply"]
    assert "replica_1/g" not in [rep.names[i] for i in rep.predecessors(index["replica_1/apply"])]
    assert device[index["replica_1/apply"]] == 1 and device[index["replica_0/f"]] == 0
    # tensor k is reduced on replica k mod 2: one mean per replica's host
    assert sorted(device[[index["allreduce/g/0"], index["allreduce/delta/0"]]].tolist()) == [0, 1]


def gradient_chain():
    """x -> f -> g (the gradient, 1000 B) -> apply <- w."""
    return CostGraph.build(names=["x", "f", "g", "w", "apply"],
                           ops=["Placeholder", "MatMul", "MatMul", "VariableV2", "ApplyGradientDescent"],
                           comp_us=[0, 10, 5, 0, 1], edge_src=["x", "f", "g", "w"],
                           edge_dst=["f", "g", "apply", "apply"], edge_bytes=[0, 0, 1000, 0])


@pytest.mark.parametrize("devices", ["2xcpu:1", "3xcpu:1"])     # fewer replicas than hosts too
def test_step_time_adds_reduce_and_broadcast_hops(devices):
    cluster = parse_devices(devices).with_options(latency=10, bandwidth=100)   # 1000 B: 20 us
    block = replicas.estimate(gradient_chain(), np.zeros(5, np.int32), cluster, 2, per_replica_us=16.0)
    # replica 1's gradient goes to host 0 (20 us), its mean comes back (20 us), then apply;
    # a third host takes no part
    assert block["step_time_us"] == pytest.approx(10 + 5 + 20 + 20 + 1)
    assert block["averaged_tensors"] == 1 and block["allreduce_bytes"] == 1000
    assert block["hosts"] == ["/job:worker/task:0", "/job:worker/task:1"]
    assert hosts.replica_cluster(cluster, 2).num_devices == 1


def test_more_replicas_than_hosts_is_refused():
    with pytest.raises(UserError, match="--replicas: 3 replicas need 3 hosts"):
        hosts.replica_devices(parse_devices("2xcpu:2"), 3)


def test_hosts_must_have_host_zeros_devices(tmp_path):
    doc = {"format": "pardnn-cluster", "version": 1, "hosts": [
        {"task": "/job:worker/task:0", "devices": [{"name": "CPU:0", "memory": "1GiB"},
                                                   {"name": "CPU:1", "memory": "1GiB"}]},
        {"task": "/job:worker/task:1", "devices": [{"name": "CPU:0", "memory": "1GiB"}]}]}
    path = tmp_path / "c.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(UserError, match="task:1 has no CPU:1"):
        hosts.replica_devices(parse_devices(str(path)), 2)


@pytest.fixture
def step_json(tmp_path):
    path = tmp_path / "step.json"
    training_step().to_json(path)
    return path


def test_place_with_replicas_reports_the_step_with_the_allreduce(step_json, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["place", str(step_json), "--devices", "2xcpu:2", "--replicas", "2",
                 "--algorithm", "round-robin", "-o", str(out)]) == 0
    report = json.loads((out / "report.json").read_text())
    assert report["devices"] == ["/job:worker/task:0/device:CPU:0", "/job:worker/task:0/device:CPU:1"]
    block = report["replicas"]
    assert block["count"] == 2 and block["averaged_tensors"] == 2 and block["allreduce_bytes"] == 1400
    assert block["step_time_us"] > block["per_replica_makespan_us"] == report["makespan_us"]
    assert "2 replicas on /job:worker/task:0, /job:worker/task:1" in capsys.readouterr().out


@pytest.mark.parametrize("replicas, message", [("3", "3 replicas need 3 hosts"), ("0", "at least 1")])
def test_bad_replica_counts_exit_2(step_json, tmp_path, capsys, replicas, message):
    assert main(["place", str(step_json), "--devices", "2xcpu:2", "--replicas", replicas,
                 "-o", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
    assert not (tmp_path / "out").exists()


def test_replicas_on_a_graph_without_tf_op_names_is_refused(tmp_path, capsys):
    g = training_step()
    path = tmp_path / "anon.json"
    CostGraph.build(names=list(g.names), comp_us=g.comp_us, edge_src=g.edge_src, edge_dst=g.edge_dst,
                    edge_bytes=g.edge_bytes, edge_slot=g.edge_slot).to_json(path)
    out = tmp_path / "out"
    assert main(["place", str(path), "--devices", "2xcpu:2", "--replicas", "2", "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"--replicas: {path} has no variable update that reads the data" in err
    assert not out.exists()


def test_one_replica_costs_what_the_placement_alone_costs(step_json, tmp_path):
    out = tmp_path / "out"
    assert main(["place", str(step_json), "--devices", "2xcpu:2", "--replicas", "1",
                 "--algorithm", "round-robin", "-o", str(out)]) == 0
    report = json.loads((out / "report.json").read_text())
    block = report["replicas"]
    assert block["count"] == 1 and block["hosts"] == ["/job:worker/task:0"]
    assert block["averaged_tensors"] == 2 and block["allreduce_bytes"] == 1400
    # the mean of one replica sits on its update's device: no extra hop
    assert block["step_time_us"] == pytest.approx(report["makespan_us"])


def test_one_host_is_cut_into_groups_of_devices_in_order():
    """Inside one host (a DGX), replica r takes the r-th group of K/R devices, and one
    replica is placed on the first group, with its links."""
    cluster = parse_devices("cpu:8")
    assert hosts.replica_devices(cluster, 4).tolist() == [[0, 1], [2, 3], [4, 5], [6, 7]]
    one = hosts.replica_cluster(cluster, 4)
    assert one.names == cluster.names[:2] and one.latency_us.shape == (2, 2)
    assert hosts.replica_devices(cluster, 1).tolist() == [list(range(8))]
    with pytest.raises(UserError, match="3 replicas on one host need a device count that 3 divides; "
                                        "--devices has 8 devices"):
        hosts.replica_devices(cluster, 3)
    with pytest.raises(UserError, match="cannot share its host tier"):
        hosts.replica_devices(parse_devices("dgx-h100:2+host"), 2)


def test_replicas_inside_one_host_cost_the_allreduce_over_its_links(step_json, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["place", str(step_json), "--devices", "cpu:4", "--replicas", "2",
                 "--algorithm", "round-robin", "-o", str(out)]) == 0
    report = json.loads((out / "report.json").read_text())
    assert len(report["devices"]) == 2
    block = report["replicas"]
    assert block["count"] == 2 and block["devices_per_replica"] == 2
    assert block["hosts"] == ["/job:localhost/replica:0/task:0"] * 2
    assert block["step_time_us"] > block["per_replica_makespan_us"] == report["makespan_us"]
    assert "2 replicas of 2 devices each on /job:localhost/replica:0/task:0" in capsys.readouterr().out


def test_the_order_kept_with_replicas_is_the_one_whose_replicated_step_is_shortest(monkeypatch):
    """Of the orders that fit, the replicated step decides (an order that speeds one
    replica may slow the all-reduce); FIFO on a tie; one that does not fit never."""
    from pardnn.io.placement import Placement
    from pardnn.pipeline.schedule import Scheduled
    from pardnn.graph.order import Order
    steps = {"fifo": 100.0, "early-micro-batch": 90.0, "backward-first": 80.0}
    orders = {name: Order.empty() for name in steps}        # the stub tells them apart by identity
    named = {id(order): name for name, order in orders.items()}
    monkeypatch.setattr(replicas, "estimate", lambda g, d, c, r, us, order: {"step_time_us": steps[named[id(order)]]})

    def scheduled(name, fits=True):
        return Scheduled(name, 1.0, np.zeros(1), fits, 0.0, orders[name], f"{name} schedule", f"{name} profile")
    g = training_step()
    placement = Placement(np.zeros(g.num_nodes, np.int32), parse_devices("cpu:1"))
    tried = [scheduled("fifo"), scheduled("early-micro-batch"), scheduled("backward-first", fits=False)]
    kept = replicas.fastest_replicated(g, placement, tried, None, 2)
    assert kept.schedule_name == "early-micro-batch" and kept.schedule == "early-micro-batch schedule"
    steps["early-micro-batch"] = 100.0
    assert replicas.fastest_replicated(g, placement, tried, None, 2).schedule_name == "fifo"
    assert replicas.fastest_replicated(g, placement, [], None, 2) is placement


def test_capacity_says_what_replicas_inside_the_host_give(step_json, tmp_path, capsys):
    """A row of k devices, k dividing the host's K: its placement as K/k replicas, the
    step `pardnn place --replicas K/k` reports for it."""
    assert main(["capacity", str(step_json), "--devices", "cpu:2", "--memory", "1MB", "--reserve", "0",
                 "-o", str(tmp_path / "cap")]) == 0
    assert "2 replicas of 1 device (--replicas 2, the profile's batch each): step " in capsys.readouterr().out
    rows = json.loads((tmp_path / "cap" / "capacity.json").read_text())["rows"]
    one = rows[0]["replicas_at_memory"]
    assert one["count"] == 2 and one["devices_per_replica"] == 1 and "replicas_at_memory" not in rows[1]
    assert main(["place", str(step_json), "--devices", "cpu:2", "--memory", "1MB", "--reserve", "0",
                 "--replicas", "2", "-o", str(tmp_path / "placed")]) == 0
    report = json.loads((tmp_path / "placed" / "report.json").read_text())
    assert report["replicas"]["step_time_us"] == pytest.approx(one["step_time_us"])

"""Multi-host placement on TF's distributed runtime, with an in-process loopback
cluster: two tf.distribute.Server tasks on 127.0.0.1 (free ports), 2 CPU devices each.

TF cannot stop a server, so the cluster lives for the rest of the test process;
sessions isolate their state (pardnn.tf.distributed.cluster_config)."""

import json
import time

import numpy as np
import pytest

import pardnn.tf.quiet_import  # noqa: F401  (quiet TensorFlow import first)
import tensorflow as tf

from pardnn.cli import main
from pardnn.hardware import parse_devices
from pardnn.hardware.cluster_file import compose, save
from pardnn.base.errors import UserError
from pardnn.hardware.hosts import host_cluster
from pardnn_builtin_models import load_module
from pardnn.io.placement import Placement
from pardnn.tf import check_placement, import_placed_graph, profile, session_config
from pardnn.tf.session import default_session_config
from pardnn.tf.profile_loader import load_profile
from pardnn.tf.distributed import free_port, loopback_cluster, open_session
from pardnn.tf.graphdef import read_graph_def
from pardnn.tf.replicate import replicate
from pardnn.tf.run import train

pytestmark = pytest.mark.tf
tf1 = tf.compat.v1
STEPS = 3
VARIABLES = ["layer0/w", "layer0/b", "layer1/w", "layer1/b", "logits/w", "logits/b"]


@pytest.fixture(scope="module")
def loopback():
    return loopback_cluster(tasks=2, cpus=2)


@pytest.fixture(scope="module")
def cluster_json(loopback, tmp_path_factory):
    path = tmp_path_factory.mktemp("cluster") / "loopback.json"
    save(compose(parse_devices("cpu:2"), 2, addresses=loopback.addresses), str(path))
    return path


@pytest.fixture(scope="module")
def mlp_profile(tmp_path_factory):
    root = tmp_path_factory.mktemp("prof") / "mlp"
    assert main(["profile", "mlp", "--size", "tiny", "--steps", "1", "-o", str(root)]) == 0
    return root


def _unplaced(knobs, batch):
    """Losses and variables of `STEPS` steps of mlp at `batch` in one local session."""
    model = load_module("mlp").build(**{**knobs, "batch": batch})
    with tf1.Session(graph=model.graph, config=session_config(1)) as session:
        session.run(model.init)
        losses = train(session, model.train_op, model.loss, model.feed, STEPS)
        values = session.run({v: f"{v}/Read/ReadVariableOp:0" for v in VARIABLES})
    return model, losses, values


@pytest.mark.slow
def test_model_placed_across_both_hosts_runs_unmoved_with_the_same_loss(mlp_profile, cluster_json, tmp_path):
    out = tmp_path / "placed"
    assert main(["place", str(mlp_profile), "--devices", str(cluster_json), "--algorithm", "round-robin",
                 "-o", str(out)]) == 0
    knobs = json.loads((out / "profile.json").read_text())["knobs"]
    model, expected, _ = _unplaced(knobs, knobs["batch"])
    graph_def = read_graph_def(str(out / "placed_graph.pb"))
    assert {n.device.rsplit("/device:", 1)[0] for n in graph_def.node} == {"/job:worker/task:0",
                                                                          "/job:worker/task:1"}
    graph = tf.Graph()
    with graph.as_default():
        import_placed_graph(graph_def)
    with open_session(parse_devices(str(cluster_json)), graph) as session:
        session.run(model.init)
        (_, first), check = check_placement(session, [model.train_op, model.loss], model.feed(0), graph_def)
        losses = [float(first)] + train(session, model.train_op, model.loss, model.feed, STEPS - 1, start=1)
    assert check.moved == []
    assert len(check.nodes_per_device) == 4 and min(check.nodes_per_device.values()) > 0
    assert losses == pytest.approx(expected, abs=1e-5)


@pytest.mark.slow
def test_two_replicas_stay_identical_and_match_the_full_batch(mlp_profile, cluster_json, tmp_path, capsys):
    out = tmp_path / "replicated"
    assert main(["place", str(mlp_profile), "--devices", str(cluster_json), "--replicas", "2",
                 "-o", str(out)]) == 0
    assert "2 replicas on /job:worker/task:0, /job:worker/task:1" in capsys.readouterr().out
    _trains_as_the_full_batch(out, lambda graph: open_session(parse_devices(str(cluster_json)), graph))


@pytest.mark.slow
def test_two_replicas_inside_one_host_match_the_full_batch(mlp_profile, tmp_path, capsys):
    """On one host, `--replicas 2` over 4 devices: replica r on devices 2r and 2r + 1,
    run by a plain session under TF's default config, as a user's script runs it."""
    out = tmp_path / "replicated"
    assert main(["place", str(mlp_profile), "--devices", "cpu:4", "--replicas", "2", "-o", str(out)]) == 0
    assert "2 replicas of 2 devices each on /job:localhost/replica:0/task:0" in capsys.readouterr().out
    report = json.loads((out / "report.json").read_text())
    assert report["devices"] == [f"/job:localhost/replica:0/task:0/device:CPU:{i}" for i in range(2)]
    assert report["replicas"]["devices_per_replica"] == 2
    batch = json.loads((out / "profile.json").read_text())["knobs"]["batch"]
    assert report["replicas"]["samples_per_step"] == 2 * batch == 2 * report["samples_per_step"]
    assert report["replicas"]["time_per_sample_us"] == pytest.approx(report["replicas"]["step_time_us"] / (2 * batch))
    devices = {(n.name.split("/")[0], n.device.rsplit(":", 1)[1])
               for n in read_graph_def(str(out / "placed_graph.pb")).node if n.name.startswith("replica_")}
    assert {d for r, d in devices if r == "replica_0"} == {"0", "1"}
    assert {d for r, d in devices if r == "replica_1"} == {"2", "3"}
    _trains_as_the_full_batch(out, lambda graph: tf1.Session(graph=graph, config=default_session_config(4)))


def _trains_as_the_full_batch(out, session_of):
    """The replicated step of place output `out`, run for STEPS steps in `session_of(graph)`
    with each replica fed its slice of the full batch: no op moved, the replicas'
    variables identical, and the losses and variables those of one process on the
    full batch."""
    knobs = json.loads((out / "profile.json").read_text())["knobs"]
    b = knobs["batch"]
    full, expected_losses, expected = _unplaced(knobs, 2 * b)
    graph_def = read_graph_def(str(out / "placed_graph.pb"))
    graph = tf.Graph()
    with graph.as_default():
        import_placed_graph(graph_def)
        reads = {}
        for r in range(2):
            for v in VARIABLES:
                handle = graph.get_tensor_by_name(f"replica_{r}/{v}:0")
                with tf.device(handle.op.device):
                    reads[r, v] = tf.raw_ops.ReadVariableOp(resource=handle, dtype=tf.float32)
    losses = []
    with session_of(graph) as session:
        session.run("init")
        for step in range(STEPS):
            feed = {f"replica_{r}/{name}": value[r * b:(r + 1) * b]
                    for name, value in full.feed(step).items() for r in range(2)}
            (_, loss), check = check_placement(session, ["train", "loss:0"], feed, graph_def)
            assert check.moved == []
            losses.append(float(loss))
        values = session.run(reads)
    for v in VARIABLES:
        assert np.array_equal(values[0, v], values[1, v]), v
        assert values[0, v] == pytest.approx(expected[v], abs=1e-5), v
    assert losses == pytest.approx(expected_losses, abs=1e-5)


@pytest.mark.slow
def test_links_on_the_loopback_cluster_writes_a_file_place_accepts(loopback, mlp_profile, tmp_path, capsys):
    measured = tmp_path / "measured.json"
    assert main(["links", "--workers", ",".join(loopback.addresses), "--sizes", "4KiB,256KiB",
                 "--repeats", "2", "--hops", "4", "-o", str(measured)]) == 0
    out = capsys.readouterr().out
    assert "bandwidth (GB/s)" in out and "fit error" in out and "task:1/CPU:1" in out
    cluster = parse_devices(str(measured))
    assert cluster.num_devices == 4 and [h.address for h in cluster.hosts] == loopback.addresses
    off = ~np.eye(4, dtype=bool)
    assert np.all(np.isfinite(cluster.latency_us)) and np.all(cluster.bandwidth[off] > 0)
    assert main(["place", str(mlp_profile), "--devices", str(measured), "--algorithm", "pardnn-hier",
                 "-o", str(tmp_path / "placed")]) == 0
    assert main(["links", "--cluster", str(measured), "--sizes", "4KiB,8KiB", "--repeats", "1",
                 "--hops", "2", "-o", str(tmp_path / "again.json")]) == 0


def test_unreachable_worker_is_a_one_line_error_in_bounded_time(loopback, tmp_path, capsys):
    dead = f"127.0.0.1:{free_port()}"
    start = time.monotonic()
    assert main(["links", "--workers", f"{loopback.addresses[0]},{dead}", "--timeout", "3s",
                 "-o", str(tmp_path / "c.json")]) == 2
    assert time.monotonic() - start < 10
    err = capsys.readouterr().err
    assert f"cannot reach worker /job:worker/task:1 at {dead}" in err and err.count("\n") == 1
    assert not (tmp_path / "c.json").exists()


def test_cluster_file_with_a_device_the_cluster_lacks_names_it(loopback, tmp_path, capsys):
    bad = tmp_path / "bad.json"
    save(compose(parse_devices("cpu:3"), 2, addresses=loopback.addresses), str(bad))
    assert main(["links", "--cluster", str(bad), "-o", str(tmp_path / "c.json")]) == 2
    err = capsys.readouterr().err
    assert "lists /job:worker/task:0/device:CPU:2, but the running cluster has no such device" in err
    assert err.count("\n") == 1


def test_replicas_refuse_sparse_updates(tmp_path):
    """An embedding trained by SGD updates its rows by batch-dependent indices: those
    cannot be averaged, so replication is refused with a clear error."""
    graph = tf.Graph()
    with graph.as_default():
        ids = tf1.placeholder(tf.int32, [4], name="ids")
        table = tf1.get_variable("table", [10, 3], use_resource=True)
        loss = tf.reduce_sum(tf.nn.embedding_lookup(table, ids), name="loss")
        train_op = tf1.train.GradientDescentOptimizer(0.1).minimize(loss, name="train")
        init = tf1.global_variables_initializer()
    with tf1.Session(graph=graph, config=session_config(1)) as session:
        session.run(init)
        profile(session, train_op, {"ids:0": np.arange(4)}, steps=1, out_dir=str(tmp_path / "prof"))
    cost_graph, _ = load_profile(str(tmp_path / "prof"))
    cluster = parse_devices("2xcpu:1")
    placement = Placement(np.zeros(cost_graph.num_nodes, np.int32), host_cluster(cluster, 0))
    with pytest.raises(UserError, match="not floating point"):
        replicate(read_graph_def(str(tmp_path / "prof" / "graph.pb")), cost_graph, placement, cluster, 2)


def test_replicated_graph_renames_moves_and_averages(mlp_profile, tmp_path):
    out = tmp_path / "replicated"
    assert main(["place", str(mlp_profile), "--devices", "2xcpu:2", "--replicas", "2",
                 "--algorithm", "round-robin", "-o", str(out)]) == 0
    nodes = {n.name: n for n in read_graph_def(str(out / "placed_graph.pb")).node}
    original = read_graph_def(str(mlp_profile / "graph.pb")).node
    assert len(nodes) == 2 * len(original) + 6 * 3 + 2 + 3     # 6 means, train + init, loss
    var = nodes["replica_1/layer0/w"]
    assert var.device.startswith("/job:worker/task:1/device:CPU:")
    assert var.attr["shared_name"].s == b"replica_1/layer0/w"
    assert list(var.attr["_class"].list.s) == [b"loc:@replica_1/layer0/w"]
    mean = "allreduce/gradients/layer0/MatMul_grad/tuple/control_dependency_1/0"
    for r in range(2):
        assert mean in nodes[f"replica_{r}/train/update_layer0/w/ResourceApplyAdam"].input
    assert nodes[mean + "/sum"].input == ["replica_0/gradients/layer0/MatMul_grad/tuple/control_dependency_1:0",
                                          "replica_1/gradients/layer0/MatMul_grad/tuple/control_dependency_1:0"]
    assert nodes["train"].input == ["^replica_0/train", "^replica_1/train"]
    assert nodes["loss"].op == "RealDiv" and nodes["replica_0/x"].op == "Placeholder"


@pytest.mark.slow
def test_replicas_of_a_micro_batched_step_carry_its_order(tmp_path, capsys):
    """--replicas with a step of micro-batches: each replica carries the order its
    placement chose (order.csv's pairs as `^replica_<r>/before` inputs), the estimate
    emulates it, and the replicas train like one process on the full batch."""
    prof, out = tmp_path / "prof", tmp_path / "replicated"
    assert main(["profile", "mlp", "--size", "tiny", "--steps", "1", "--micro-batches", "2", "-o", str(prof)]) == 0
    assert main(["place", str(prof), "--devices", "cpu:4", "--replicas", "2", "--schedule", "early-micro-batch",
                 "-o", str(out)]) == 0
    report = json.loads((out / "report.json").read_text())
    assert report["schedule"] == "early-micro-batch"
    assert report["replicas"]["step_time_us"] >= report["replicas"]["per_replica_makespan_us"] == report["makespan_us"]
    rows = (out / "order.csv").read_text().splitlines()[1:]
    nodes = {n.name: n for n in read_graph_def(str(out / "placed_graph.pb")).node}
    assert rows and all(f"^replica_{r}/{before}" in nodes[f"replica_{r}/{after}"].input
                        for before, after in (row.split(",") for row in rows) for r in range(2))
    capsys.readouterr()
    _trains_as_the_full_batch(out, lambda graph: tf1.Session(graph=graph, config=default_session_config(4)))

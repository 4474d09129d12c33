"""The host as a placement tier (issue 41): devices of different speeds in one cluster,
`PRESET+host`, `--host-memory`, cluster files with rates, the emulator, placers and
repair costing each device at its own rate, and bad input. On hand-made graphs whose
right answer is known."""

import json

import numpy as np
import pytest

from pardnn.emulator.scheduler import simulate
from pardnn.base.errors import UserError
from pardnn.graph import REFERENCE, RESIDUAL, CostGraph
from pardnn.graph.constraints import allowed_devices, onto_allowed, violations
from pardnn.graph.op_rates import COMPUTE, MEMORY, node_times, rate_classes, time_matrix
from pardnn.hardware import Cluster, Device, GiB, parse_devices
from pardnn.hardware.gpu_specs import H100_SXM5
from pardnn.hardware.host_specs import XEON_8480C
from pardnn.placers import etf, heft, registry
from pardnn.pipeline.judge import judge
from pardnn.pipeline.bounds import step_lower_bound
from pardnn.pipeline.place import place
from pardnn.pipeline.report import evaluate

TiB = 2**40


def two_speeds(memory=GiB, host_memory=GiB, compute=0.25, mem_rate=0.5, gpus=1, bandwidth=1e3):
    """`gpus` GPUs and a host CPU at the given rates, every link `bandwidth` bytes/us, 5 us."""
    devices = tuple(Device(f"/device:GPU:{i}", "GPU", memory) for i in range(gpus)) + (
        Device("/device:CPU:0", "CPU", host_memory, compute_rate=compute, memory_rate=mem_rate, host_tier=True),)
    k = gpus + 1
    lat, bw = np.full((k, k), 5.0), np.full((k, k), float(bandwidth))
    np.fill_diagonal(lat, 0.0)
    np.fill_diagonal(bw, np.inf)
    return Cluster(devices, lat, bw)


# ------------------------------------------------------------------ presets
def test_dgx_h100_plus_host_adds_the_host_after_the_gpus():
    c = parse_devices("dgx-h100+host")
    assert c.num_devices == 9 and c.preset == "dgx-h100+host"
    host = c.devices[8]
    assert host.name.endswith("/device:CPU:0") and host.kind == "CPU" and host.host_tier
    assert host.memory == 2 * TiB and c.host_device == 8
    assert host.compute_rate == pytest.approx(2 * 56 * 2.0 * 64 / 494_700)    # FP32 AVX-512 over TF32
    assert host.memory_rate == pytest.approx(2 * 8 * 4.8 * 8 / 3350)          # DDR5 over HBM3
    assert np.all(c.bandwidth[8, :8] == 48e3) and np.all(c.bandwidth[:8, 8] == 48e3)     # PCIe 5.0 x16
    assert np.all(c.bandwidth[:8, :8][~np.eye(8, dtype=bool)] == 450e3)       # NVLink as before
    assert c.tiers.tolist() == [0] * 8 + [1] and c.mixed and not c.uniform
    assert host.memory_bandwidth > c.bandwidth[0, 8]


@pytest.mark.parametrize("spec, gpus", [("dgx-h100:2+host", 2), ("gpu:3+host", 3), ("4+host", 4),
                                        ("dgx2+host", 16), ("dgx1-v100:4+host", 4), ("dgx-a100+host", 8)])
def test_every_gpu_preset_has_its_host(spec, gpus):
    c = parse_devices(spec)
    assert c.num_devices == gpus + 1 and c.host_device == gpus
    assert [d.kind for d in c.devices] == ["GPU"] * gpus + ["CPU"]
    assert 0 < c.devices[-1].compute_rate < 1 and 0 < c.devices[-1].memory_rate < 1


def test_presets_without_host_are_as_before():
    c = parse_devices("dgx-h100")
    assert c.uniform and not c.mixed and c.host_device == -1 and c.tiers.tolist() == [0] * 8
    assert np.array_equal(c.time_scale, np.ones((2, 8)))


def test_several_hosts_each_get_their_host():
    c = parse_devices("2xdgx-h100+host")
    assert c.num_devices == 18
    hosts = [d.name for d in c.devices if d.host_tier]
    assert hosts == ["/job:worker/task:0/device:CPU:0", "/job:worker/task:1/device:CPU:0"]


def test_cpu_has_no_host_to_add():
    with pytest.raises(UserError, match="--devices: cpu has no separate host"):
        parse_devices("cpu:4+host")


def test_memory_means_the_accelerators_and_host_memory_the_host():
    c = parse_devices("dgx-h100:2+host").with_options(memory=16 * GiB)
    assert c.memory.tolist() == [16 * GiB, 16 * GiB, 2 * TiB]
    c = c.with_options(host_memory=TiB)
    assert c.memory.tolist() == [16 * GiB, 16 * GiB, TiB]
    with pytest.raises(UserError, match="--host-memory: dgx-h100 has no host device"):
        parse_devices("dgx-h100").with_options(host_memory=TiB)


def test_host_spec_rates_are_relative_to_the_presets_gpu():
    compute, memory = XEON_8480C.rates(H100_SXM5)
    assert compute == pytest.approx(14_336 / 494_700) and memory == pytest.approx(614.4 / 3350)


# ------------------------------------------------------------ cluster files
def cluster_doc(**host_fields):
    host = {"name": "CPU:0", "memory": "1TiB", "host": True, "rate": {"compute": 0.03, "memory": 0.2},
            "memory_bandwidth": "600GB/s", "link": {"bandwidth": "48GB/s", "latency": "10us"}}
    host.update(host_fields)
    return {"format": "pardnn-cluster", "version": 1,
            "hosts": [{"task": "/job:localhost/replica:0/task:0",
                       "devices": [{"name": "GPU:0", "memory": "80GiB"}, {"name": "GPU:1", "memory": "80GiB"},
                                   host]}],
            "intra_host": {"latency": "8us", "bandwidth": "450GB/s"}}


def write(tmp_path, doc, name="c.json"):
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return str(path)


def test_a_cluster_file_states_the_host(tmp_path):
    c = parse_devices(write(tmp_path, cluster_doc()))
    host = c.devices[2]
    assert host.host_tier and host.memory == TiB
    assert (host.compute_rate, host.memory_rate) == (0.03, 0.2)
    assert c.bandwidth[0, 1] == 450e3 and c.bandwidth[0, 2] == c.bandwidth[2, 1] == 48e3
    assert c.latency_us[2, 0] == 10.0 and c.latency_us[0, 1] == 8.0
    from pardnn.hardware.cluster_file import load, save
    save(c, str(tmp_path / "again.json"))
    again = load(str(tmp_path / "again.json"))
    assert again.devices == c.devices and np.array_equal(again.bandwidth, c.bandwidth)


def test_one_number_is_both_rates(tmp_path):
    c = parse_devices(write(tmp_path, cluster_doc(rate=0.5)))
    assert (c.devices[2].compute_rate, c.devices[2].memory_rate) == (0.5, 0.5)


@pytest.mark.parametrize("fields, message", [
    ({"rate": 0}, r"devices\[2\].rate.compute: 0 is no rate"),
    ({"rate": -1}, r"devices\[2\].rate.compute: -1 is no rate"),
    ({"rate": 1e9}, "1000000000.0 is no rate; give a number from 0.0001 to 10000"),
    ({"rate": {"compute": 0.1, "memory": 0}}, r"rate.memory: 0 is no rate"),
    ({"rate": "fast"}, "'fast' is no rate"),
    ({"rate": True}, "True is no rate"),
    ({"rate": {"speed": 2}}, "unknown field 'speed'"),
    ({"link": {"bandwidth": "900GB/s"}}, "a link of .*CPU:0 moves 900 GB/s, faster than its memory"),
    ({"name": "NPU:0"}, "unknown device kind 'NPU' \\(TensorFlow places ops on CPU, GPU, TPU\\)"),
    ({"host": "yes"}, "host: give true or false"),
    ({"kind": "NPU"}, r"devices\[2\].kind: unknown device kind 'NPU'"),
    ({"kind": "GPU"}, r"devices\[2\].kind: 'GPU' is not the kind its name 'CPU:0' gives"),
    ({"name": "GPU:2"}, r"devices\[2\].host: the host device is the host's CPU, not a GPU"),
])
def test_bad_cluster_files_are_one_line_errors(tmp_path, fields, message):
    with pytest.raises(UserError, match=message) as info:
        parse_devices(write(tmp_path, cluster_doc(**fields)))
    assert "\n" not in str(info.value) and "c.json" in str(info.value)


def test_two_host_devices_on_one_host_are_refused(tmp_path):
    doc = cluster_doc()
    doc["hosts"][0]["devices"].append({"name": "CPU:1", "memory": "1TiB", "host": True})
    with pytest.raises(UserError, match="a host has one host device"):
        parse_devices(write(tmp_path, doc))


def test_bad_cluster_file_exits_2_from_the_cli(tmp_path, capsys):
    from pardnn.cli import main
    graph = tmp_path / "g.json"
    CostGraph.build(names=["a", "b"], comp_us=[1, 1], out_bytes=[8, 8], edge_src=["a"], edge_dst=["b"],
                    edge_bytes=[8]).to_json(graph)
    bad = write(tmp_path, cluster_doc(rate=0))
    assert main(["place", str(graph), "--devices", bad, "-o", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "rate.compute: 0 is no rate" in err
    assert not (tmp_path / "o").exists()
    assert main(["place", str(graph), "--devices", "dgx-h100:2+host", "--host-memory", "1TiB",
                 "-o", str(tmp_path / "p")]) == 0
    report = json.loads((tmp_path / "p" / "report.json").read_text())
    assert len(report["peak_memory_bytes"]) == 3 and report["feasible"]
    assert main(["place", str(graph), "--devices", "dgx-h100:2", "--host-memory", "1TiB",
                 "-o", str(tmp_path / "q")]) == 2
    assert "--host-memory: dgx-h100 has no host device" in capsys.readouterr().err


# --------------------------------------------------------------- op rates
def test_ops_scale_by_their_class():
    assert rate_classes(["MatMul", "Conv2D", "Add", "ResourceApplyAdam", ""]).tolist() == \
        [COMPUTE, COMPUTE, MEMORY, MEMORY, MEMORY]
    g = CostGraph.build(names=["mm", "add"], ops=["MatMul", "AddV2"], comp_us=[10.0, 4.0],
                        edge_src=["mm"], edge_dst=["add"], edge_bytes=[1000])
    c = two_speeds()
    assert node_times(g, c, [1, 1]).tolist() == [40.0, 8.0]          # 1 / 0.25 and 1 / 0.5
    assert time_matrix(g, c).tolist() == [[10.0, 40.0], [4.0, 8.0]]
    uniform = parse_devices("cpu:2")
    assert node_times(g, uniform, [1, 1]) is g.comp_us                # alike devices: the costs themselves


def test_the_emulator_runs_each_op_at_its_devices_rate():
    g = CostGraph.build(names=["mm", "add"], ops=["MatMul", "AddV2"], comp_us=[10.0, 4.0],
                        out_bytes=[1000, 8], edge_src=["mm"], edge_dst=["add"], edge_bytes=[1000])
    c = two_speeds()
    s = simulate(g, c, np.array([0, 1]))
    assert s.finish[0] == 10.0
    assert s.start[1] == 10.0 + 5.0 + 1000 / 1e3 and s.finish[1] == s.start[1] + 8.0
    assert s.busy_us.tolist() == [10.0, 8.0]
    on_host = simulate(g, c, np.array([1, 1]))
    assert on_host.makespan == 48.0
    fields = evaluate(g, c, np.array([1, 1]))
    assert fields.single_device_us == 14.0 and fields.makespan_us == 48.0
    assert step_lower_bound(g, c).us <= 14.0


def test_lower_bounds_hold_on_devices_of_different_speeds():
    from tools.synth_graph import synth_graph
    from pardnn.emulator.trial import busiest_device_us, longest_path_us
    rng = np.random.default_rng(0)
    for seed in range(20):
        g = synth_graph(60 + 10 * seed, seed=seed, shape="chain" if seed % 2 else "dag")
        c = two_speeds(gpus=2, compute=0.1, mem_rate=0.3)
        bound = step_lower_bound(g, c).us
        for _ in range(5):
            device = rng.integers(0, 3, g.num_nodes)
            device = device[g.group_nodes[g.group_ptr[:-1]]][g.group]
            makespan = simulate(g, c, device).makespan
            assert bound <= makespan * (1 + 1e-9)
            assert busiest_device_us(g, c, device) <= makespan * (1 + 1e-9)
            assert longest_path_us(g, c, device) <= makespan * (1 + 1e-9)


# ------------------------------------------------------------ constraints
def test_ops_without_a_cpu_kernel_never_go_to_the_host():
    g = CostGraph.build(names=["a", "rnn", "b"], ops=["Add", "CudnnRNN", "Add"], comp_us=[1, 1, 1],
                        pinned=["", "GPU", ""], edge_src=["a", "rnn"], edge_dst=["rnn", "b"], edge_bytes=[8, 8])
    c = two_speeds(gpus=2)
    allowed = allowed_devices(g, c)
    assert allowed[g.group[1]].tolist() == [True, True, False]
    assert violations(g, c, [0, 2, 0]) == ["pinned node 'rnn' on a device of the wrong kind"]
    assert onto_allowed(g, c, [2, 2, 2]).tolist() == [2, 0, 2]
    assert allowed_devices(g, parse_devices("cpu:2")).all()          # no GPU: the pin restricts nothing


# ---------------------------------------------------------------- placers
def chain_of_four():
    """Four 10 us ops in a chain, tiny tensors."""
    names = ["a", "b", "c", "d"]
    return CostGraph.build(names=names, ops=["MatMul"] * 4, comp_us=[10.0] * 4, out_bytes=[8] * 4,
                           edge_src=names[:-1], edge_dst=names[1:], edge_bytes=[8] * 3)


def test_etf_and_heft_keep_work_off_a_slow_idle_host():
    """Two independent 10 us chains on one GPU and a host 100x slower: starting the second
    chain at once on the idle host would finish at 2,000 us, after the GPU runs both."""
    g = CostGraph.build(names=["a", "b", "x", "y"], ops=["MatMul"] * 4, comp_us=[10.0] * 4,
                        edge_src=["a", "x"], edge_dst=["b", "y"], edge_bytes=[8, 8])
    c = two_speeds(compute=0.01, mem_rate=0.01)
    assert etf.place(g, c).tolist() == [0, 0, 0, 0]
    assert heft.place(g, c).tolist() == [0, 0, 0, 0]
    fast = two_speeds(compute=1.0, mem_rate=1.0)           # alike: ETF starts the second chain there
    assert sorted(etf.place(g, fast).tolist()) == [0, 0, 1, 1]


def test_placers_that_cost_devices_alike_place_on_the_fastest_devices():
    g = chain_of_four()
    c = two_speeds(gpus=2)
    for name in ("round-robin", "topo", "linear", "metis", "stages"):
        device = registry.run(name, g, c)
        assert set(np.asarray(device).tolist()) <= {0, 1}, name
    assert registry.PLACERS["exact"].speeds is None and not registry.applies("exact", g, c)
    with pytest.raises(UserError, match="cannot place on devices with rates"):
        registry.run("exact", g, c)
    assert registry.applies("etf-fastest", g, c) and not registry.applies("etf-fastest", g, parse_devices("cpu:2"))


def test_a_pin_the_fastest_devices_lack_goes_to_its_kind():
    g = CostGraph.build(names=["a", "save"], ops=["Add", "SaveV2"], comp_us=[1, 1], pinned=["", "CPU"],
                        edge_src=["a"], edge_dst=["save"], edge_bytes=[8])
    c = two_speeds(gpus=2)
    assert registry.run("round-robin", g, c).tolist()[1] == 2


# ----------------------------------------------------------------- repair
def training_step(variables=4, width=100, gpu_time=2.0):
    """`variables` variable groups {var (resident `width` x 3 bytes: weight and two
    slots), read, apply} around a chain of MatMuls: mm_i reads var_i; grad_i feeds apply_i."""
    names, ops, comp, out, kind, group, edges = [], [], [], [], [], [], []

    def node(name, op, t, nbytes, k=0, g=None):
        names.append(name), ops.append(op), comp.append(t), out.append(nbytes), kind.append(k)
        group.append(name if g is None else g)
    node("x", "Placeholder", 0.1, 64)
    prev = "x"
    for i in range(variables):
        node(f"var{i}", "VarHandleOp", 0.0, 3 * width, RESIDUAL, f"v{i}")
        node(f"read{i}", "ReadVariableOp", 0.0, width, REFERENCE, f"v{i}")
        node(f"mm{i}", "MatMul", gpu_time, 64)
        edges += [(f"var{i}", f"read{i}", width), (f"read{i}", f"mm{i}", width), (prev, f"mm{i}", 64)]
        prev = f"mm{i}"
    for i in reversed(range(variables)):
        node(f"grad{i}", "MatMul", gpu_time, width)
        node(f"apply{i}", "ResourceApplyAdam", 0.5, 0, 0, f"v{i}")
        edges += [(prev, f"grad{i}", 64), (f"grad{i}", f"apply{i}", width)]
        prev = f"grad{i}"
    src, dst, nbytes = zip(*edges)
    return CostGraph.build(names=names, ops=ops, comp_us=comp, out_bytes=out, kind=kind, group=group,
                           edge_src=src, edge_dst=dst, edge_bytes=nbytes)


def test_the_repair_offloads_variables_and_their_updates_not_compute():
    g = training_step()
    c = two_speeds(memory=900, host_memory=10**6, compute=0.05, mem_rate=0.2, bandwidth=100)
    c = Cluster(c.devices, c.latency_us, c.bandwidth, reserve=0.0)
    fixed = judge(g, c, np.zeros(g.num_nodes, np.int32))
    assert np.all(fixed.profile.peak_bytes <= c.capacity)
    on_host = {g.names[i] for i in np.flatnonzero(fixed.device == 1)}
    assert on_host and all(n.startswith(("var", "read", "apply")) for n in on_host)


def test_the_repair_fills_the_gpus_before_the_host():
    g = training_step()                                   # one device's peak: 1,400 bytes
    c = two_speeds(memory=1000, host_memory=10**6, gpus=2, bandwidth=100)
    c = Cluster(c.devices, c.latency_us, c.bandwidth, reserve=0.0)
    fixed = judge(g, c, np.zeros(g.num_nodes, np.int32))
    assert np.all(fixed.profile.peak_bytes <= c.capacity)
    assert np.any(fixed.device == 1) and not np.any(fixed.device == 2)    # GPU 1 absorbs it, not the host


def test_offload_only_when_the_gpus_cannot_hold_the_model():
    g = training_step()
    roomy = two_speeds(memory=10**6, host_memory=10**6, compute=0.05, mem_rate=0.2, bandwidth=100)
    placement, report = place(g, roomy)
    assert not np.any(placement.device == 1) and report.feasible
    tight = Cluster(two_speeds(memory=900, host_memory=10**6, compute=0.05, mem_rate=0.2, bandwidth=100).devices,
                    roomy.latency_us, roomy.bandwidth, reserve=0.0)
    placement, report = place(g, tight)
    assert report.feasible and np.any(placement.device == 1)
    assert report.peak_memory_bytes[0] <= 900


def test_a_finalist_uses_the_fastest_devices_alone():
    """On devices of different speeds the second finalist refined within memory is the
    fastest candidate that leaves the host out, however far behind it is, so the host is
    kept only where it makes the refined step faster; on alike devices, the two fastest."""
    from types import SimpleNamespace
    from pardnn.pipeline import choice

    def judged(makespan, device):
        return SimpleNamespace(schedule=SimpleNamespace(makespan=makespan), moved=np.zeros(3, bool),
                               device=np.array(device), rounds=1)
    candidates = {"etf": judged(10.0, [0, 2, 1]), "heft": judged(11.0, [2, 0, 0]), "step1": judged(12.0, [0, 1, 1]),
                  "stages": judged(13.0, [0, 0, 1])}
    order = list(candidates)

    def finalists(cluster):
        return choice.finalists({n: choice.Judgement.of(j, cluster) for n, j in candidates.items()}, 3, order)
    assert finalists(two_speeds(gpus=2)) == ["etf", "step1"]
    assert finalists(parse_devices("cpu:3")) == ["etf", "heft"]
    assert finalists(None) == ["etf", "heft"]


def test_placers_see_the_fastest_devices_at_their_times_and_at_rate_1():
    """A placer that costs devices alike gets the graph's times at the fastest devices'
    rates and those devices at rate 1: an emulation it is lent runs each op once scaled.
    So does one on devices all at one rate other than 1."""
    g = chain_of_four()
    seen = []

    def spy(graph, cluster):
        seen.append((graph.comp_us.tolist(), bool(cluster.uniform), cluster.num_devices))
        return np.zeros(graph.num_nodes, np.int32)
    half = two_speeds(gpus=2, compute=0.1)
    half = Cluster(tuple(d if d.host_tier else Device(d.name, d.kind, d.memory, compute_rate=0.5, memory_rate=0.5)
                         for d in half.devices), half.latency_us, half.bandwidth)
    registry.on_fastest(g, half, spy)
    slow = Cluster(tuple(Device(f"/device:GPU:{i}", "GPU", GiB, compute_rate=0.5) for i in range(2)),
                   np.zeros((2, 2)), np.full((2, 2), 1e3))
    registry.on_fastest(g, slow, spy)
    assert seen == [([20.0] * 4, True, 2), ([20.0] * 4, True, 2)]


def test_the_work_bound_counts_each_device_at_its_rate():
    """Two independent 10 us element-wise ops on a GPU and a host at half speed: in a
    step of T the two devices run at most 1.5 T of profiled work, so no step beats
    20 / 1.5 us (alike devices would give 20 / 2); the best placement takes 20 us."""
    g = CostGraph.build(names=["a", "b"], ops=["AddV2", "AddV2"], comp_us=[10.0, 10.0])
    c = two_speeds(compute=0.25, mem_rate=0.5)
    assert step_lower_bound(g, c).work_per_device_us == pytest.approx(20.0 / 1.5)
    best = min(simulate(g, c, np.array(d)).makespan for d in ([0, 0], [0, 1], [1, 0], [1, 1]))
    assert best == 20.0 and step_lower_bound(g, c).us <= best
    assert step_lower_bound(g, parse_devices("cpu:2")).work_per_device_us == 10.0


def test_explain_rebuilds_a_cluster_with_the_host(tmp_path, capsys):
    """inputs.json keeps --host-memory, so `pardnn explain` emulates the same step."""
    from pardnn.cli import main
    graph = tmp_path / "g.json"
    training_step().to_json(graph)
    out = tmp_path / "placed"
    assert main(["place", str(graph), "--devices", "gpu:1+host", "--memory", "1000B", "--reserve", "0",
                 "--host-memory", "1MiB", "-o", str(out)]) == 0
    inputs = json.loads((out / "inputs.json").read_text())
    assert inputs["host_memory"] == "1MiB"
    assert main(["explain", str(out)]) == 0
    capsys.readouterr()

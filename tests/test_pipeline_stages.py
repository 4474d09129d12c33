"""The pipeline-stage baselines (pardnn.placers.pipeline_stages: GPipe's equal stages,
RaNNC's stages of equal time) on a hand-made micro-batched step whose stages are known,
and the order each carries through the pipeline (pardnn.pipeline.place)."""

import numpy as np
import pytest

from pardnn.graph import CostGraph
from pardnn.hardware import parse_devices
from pardnn.pipeline.place import place
from pardnn.pipeline.schedule import SCHEDULES
from pardnn.placers.pipeline_stages import gpipe, rannc


def layered(m, times=(30.0, 10.0, 10.0, 10.0)):
    """M micro-batches of len(times) layers: forward micro_batch_i/layer<s>/MatMul reading
    the shared weight layer<s>/w, backward micro_batch_i/gradients/layer<s>/MatMul_grad/
    MatMul (twice the forward's time), the weight's gradient summed in `update_<s>`."""
    names, comp, src, dst, group = [], [], [], [], []

    def node(name, t, g=None):
        names.append(name), comp.append(t), group.append(g if g is not None else name)
        return name
    for s in range(len(times)):
        node(f"layer{s}/w", 0.0, f"w{s}")
        node(f"update_{s}", 1.0, f"w{s}")
    for i in range(m):
        previous = None
        for s, t in enumerate(times):
            f = node(f"micro_batch_{i}/layer{s}/MatMul", t)
            src.append(f"layer{s}/w"), dst.append(f)
            if previous:
                src.append(previous), dst.append(f)
            previous = f
        for s in reversed(range(len(times))):
            b = node(f"micro_batch_{i}/gradients/layer{s}/MatMul_grad/MatMul", 2 * times[s])
            src.append(previous), dst.append(b)
            src.append(f"micro_batch_{i}/layer{s}/MatMul"), dst.append(b)
            src.append(b), dst.append(f"update_{s}")
            previous = b
    return CostGraph.build(names, comp_us=comp, out_bytes=[64] * len(names), edge_src=src, edge_dst=dst,
                           edge_bytes=[64] * len(src), group=group)


def stages_of(graph, device):
    return {name: int(d) for name, d in zip(graph.names, device)}


@pytest.mark.parametrize("placer, want", [(gpipe, [0, 0, 1, 1]), (rannc, [0, 1, 1, 1])])
def test_every_micro_batch_and_its_backward_runs_on_its_layers_stage(placer, want):
    graph = layered(3)
    where = stages_of(graph, placer(graph, parse_devices("cpu:2")))
    for s, stage in enumerate(want):
        assert where[f"layer{s}/w"] == where[f"update_{s}"] == stage
        for i in range(3):
            assert where[f"micro_batch_{i}/layer{s}/MatMul"] == stage
            assert where[f"micro_batch_{i}/gradients/layer{s}/MatMul_grad/MatMul"] == stage


def test_a_graph_without_micro_batches_is_staged_whole():
    graph = CostGraph.build([f"op{i}" for i in range(8)], comp_us=[1.0] * 8,
                            edge_src=[f"op{i}" for i in range(7)], edge_dst=[f"op{i + 1}" for i in range(7)])
    assert gpipe(graph, parse_devices("cpu:4")).tolist() == [0, 0, 1, 1, 2, 2, 3, 3]


def test_each_baseline_carries_its_own_order_and_pardnn_beats_both():
    graph = layered(4)
    cluster = parse_devices("cpu:2").with_options(memory=2**40, reserve=0.0)
    reports = {name: place(graph, cluster, name)[1].to_json() for name in ("gpipe", "rannc", "pardnn")}
    assert reports["gpipe"]["schedule"] == "fifo" and list(reports["gpipe"]["schedules"]) == ["fifo"]
    assert reports["rannc"]["schedule"] == "early-micro-batch"
    assert set(reports["pardnn"]["schedules"]) == set(SCHEDULES)
    assert reports["pardnn"]["makespan_us"] <= min(reports["gpipe"]["makespan_us"], reports["rannc"]["makespan_us"])
    assert all(0.0 <= r["bubble"] < 1.0 and r["micro_batches"] == 4 for r in reports.values())
    assert np.isclose(reports["rannc"]["makespan_us"], reports["rannc"]["schedules"]["early-micro-batch"])


def test_capacity_rows_of_a_micro_batched_step_name_its_order():
    from pardnn.pipeline.capacity import capacity
    graph = layered(4)
    cluster = parse_devices("cpu:2").with_options(memory=2**30, reserve=0.0)
    rows = capacity(graph, cluster, [1, 2])
    for row in rows:
        doc = row.fields(graph.total_work_us())
        assert doc["schedule_at_memory"] in SCHEDULES
        assert 0.0 <= doc["bubble_at_memory"] < 1.0
    assert rows[0].fields(graph.total_work_us())["schedule_at_memory"] == "fifo"       # one device: no order helps

"""Affinity placement (pardnn.placers.step1_phases.affinity) on small hand-made graphs."""

import numpy as np
import pytest

from pardnn.hardware import parse_devices
from pardnn.graph.constraints import allowed_devices
from pardnn.emulator.scheduler import simulate
from pardnn.graph import CostGraph
from pardnn.placers.step1_phases.affinity import (WINDOWS, _queued, _queued_by_numpy,
                                                  affinity_candidates, affinity_labels)
from pardnn.emulator.trial import emulate
from pardnn.placers.step1 import partition

WEIGHT = 10**7          # 100 us on the wire at 1e5 bytes/us, far above the latency


def layer_steps(layer, steps, names, comp, group, edges):
    """Appends one layer: a variable group {v, r0..} feeding a heavy weight to each of
    `steps` chained 50 us steps m0, m1, ... (small edges between steps)."""
    names.append(f"v{layer}")
    comp.append(0.0)
    group.append(layer)
    for t in range(steps):
        names += [f"r{layer}{t}", f"m{layer}{t}"]
        comp += [0.0, 50.0]
        group += [layer, f"m{layer}{t}"]
        edges += [(f"v{layer}", f"r{layer}{t}", 8), (f"r{layer}{t}", f"m{layer}{t}", WEIGHT)]
        if t:
            edges.append((f"m{layer}{t - 1}", f"m{layer}{t}", 1000))


def two_layers(steps=4):
    """Two RNN-like layers: layer L's variable group {vL, rL0..} feeds a heavy
    weight to each step mL_t; steps chain in time (mL_t -> mL_t+1) and layer a
    feeds layer b (ma_t -> mb_t), with small activations."""
    names, comp, group, edges = [], [], [], []
    for layer in "ab":
        layer_steps(layer, steps, names, comp, group, edges)
    edges += [(f"ma{t}", f"mb{t}", 1000) for t in range(steps)]
    src, dst, nbytes = zip(*edges)
    return CostGraph.build(names=names, comp_us=comp, group=group, edge_src=list(src),
                           edge_dst=list(dst), edge_bytes=list(nbytes))


def chains(spec):
    """Layers {name: (steps, after)}: a variable group {v, r0..} feeding a heavy
    weight to each of `steps` chained 50 us steps m0, m1, ...; step 0 waits for
    the last step of every layer in `after` (small edges)."""
    names, comp, group, edges = [], [], [], []
    for layer, (steps, after) in spec.items():
        layer_steps(layer, steps, names, comp, group, edges)
        edges += [(f"m{a}{spec[a][0] - 1}", f"m{layer}0", 1000) for a in after]
    src, dst, nbytes = zip(*edges)
    return CostGraph.build(names=names, comp_us=comp, group=group, edge_src=list(src),
                           edge_dst=list(dst), edge_bytes=list(nbytes))


def balance(graph, c):
    """The balance candidate (heaviest label first onto the least loaded device)."""
    return affinity_candidates(graph, c, allowed_devices(graph, c))[0]


def cluster(k):
    return parse_devices(f"gpu:{k}").with_options(bandwidth=1e5, latency=10.0)


def device_of(graph, device, names):
    index = graph.index()
    return {int(device[index[n]]) for n in names}


def test_each_layer_goes_with_its_weights_and_layers_split():
    g, c = two_layers(), cluster(2)
    device = balance(g, c)
    a = device_of(g, device, ["va"] + [f"{x}a{t}" for x in "rm" for t in range(4)])
    b = device_of(g, device, ["vb"] + [f"{x}b{t}" for x in "rm" for t in range(4)])
    assert len(a) == 1 and len(b) == 1 and a != b


def test_step1_adopts_the_pipeline_when_it_emulates_faster():
    g, c = two_layers(steps=6), cluster(2)
    result = partition(g, c, emulate=emulate)
    heavy = g.edge_bytes == WEIGHT
    assert result.affinity
    assert np.all(result.device[g.edge_src[heavy]] == result.device[g.edge_dst[heavy]])
    assert result.makespan_us < simulate(g, c, result.mapped).makespan
    assert result.makespan_us < g.total_work_us()


def test_no_candidate_with_one_anchor_or_constrained_groups():
    g, c = two_layers(), cluster(2)
    light = CostGraph.build(names=g.names, comp_us=g.comp_us, group=g.group,
                            edge_src=g.edge_src, edge_dst=g.edge_dst,
                            edge_bytes=np.where(g.edge_bytes == WEIGHT, 1000, g.edge_bytes))
    assert affinity_candidates(light, c, allowed_devices(light, c)) == []
    allowed = allowed_devices(g, c).copy()
    allowed[0, 1] = False
    assert affinity_candidates(g, c, allowed) == []


def test_equal_labels_take_the_least_loaded_devices_lowest_first():
    g, c = two_layers(), cluster(3)
    device = balance(g, c)
    assert device_of(g, device, ["va", "ma0"]) == {0}
    assert device_of(g, device, ["vb", "mb0"]) == {1}


def test_pipeline_candidate_splits_labels_that_run_at_the_same_time():
    # a and b (4 steps each) run side by side, c (6 steps) after both. Balance puts
    # c alone and a with b, which then run in turn; the pipeline candidate takes
    # labels by start time and gives a and b a device each.
    g, c = chains({"a": (4, []), "b": (4, []), "c": (6, ["a", "b"])}), cluster(2)
    together, pipeline = affinity_candidates(g, c, allowed_devices(g, c))
    assert len(device_of(g, together, ["ma0", "mb0"])) == 1
    assert len(device_of(g, pipeline, ["ma0", "mb0"])) == 2
    assert simulate(g, c, pipeline).makespan < simulate(g, c, together).makespan
    assert partition(g, c, emulate=emulate).makespan_us <= simulate(g, c, pipeline).makespan


def test_a_group_with_two_heavy_edges_anchors_a_label():
    # each layer's variable group {v, r0, r1} sends exactly MIN_HEAVY = 2 heavy weights
    g, c = two_layers(steps=2), parse_devices("gpu:2")
    label = affinity_labels(g, c, allowed_devices(g, c))
    assert label is not None
    assert label[[g.index()[n] for n in ("va", "ra0", "ra1", "ma0", "ma1")]].tolist() == [0] * 5
    assert label[[g.index()[n] for n in ("vb", "rb0", "rb1", "mb0", "mb1")]].tolist() == [1] * 5


def test_a_node_no_anchor_reaches_gets_label_0():
    names, comp, group, edges = [], [], [], []
    for layer in "ab":
        layer_steps(layer, 2, names, comp, group, edges)
    names.append("lone")
    comp.append(1.0)
    group.append("lone")
    src, dst, nbytes = zip(*edges)
    g = CostGraph.build(names=names, comp_us=comp, group=group, edge_src=list(src),
                        edge_dst=list(dst), edge_bytes=list(nbytes))
    c = parse_devices("gpu:2")
    label = affinity_labels(g, c, allowed_devices(g, c))
    assert label[g.index()["lone"]] == 0 and label[g.index()["vb"]] == 1


@pytest.mark.parametrize("per_window", [0.1, 0.3, 3.0, 1e9])
def test_queue_kernel_is_its_numpy_definition(per_window):
    rng = np.random.default_rng(0)
    work = rng.random((12, WINDOWS)) * (rng.random((12, WINDOWS)) < 0.5)
    order = rng.permutation(12)
    got = _queued.interpreted(order, work, 3, per_window)
    assert got.tolist() == _queued_by_numpy(order, work, 3, per_window).tolist()
    if per_window == 1e9:        # no backlog anywhere: least work first, as numpy sums it
        load = np.zeros((3, WINDOWS))
        for lab in order:
            d = int(np.argmin(load.sum(axis=1)))
            assert got[lab] == d
            load[d] += work[lab]

"""The contract every placer in the registry keeps (CONTRIBUTING.md, "Add a placer"),
checked over every entry of `PLACERS` (pardnn/placers/registry.py), as scikit-learn's
`parametrize_with_checks` checks every estimator: a new placer gets these checks by
being registered. On small hand-made graphs with colocation groups and pinned nodes
(tests/helpers/placer_graphs.py), on each cluster where the entry applies
(`registry.applies`):

- an int device per node (int32), each a device of the cluster;
- no constraint violated: every colocation group on one device, every pinned node on
  a device of its kind;
- the same answer twice, from two graphs built alike, and the same built in a worker
  process of the portfolio as in this one with one CPU;
- at a tight memory, through the pipeline (its judge, and `place` for an entry that
  `--algorithm` names): every device within its capacity, or a refusal in one line
  (UserError);
- on devices of different speeds, an entry that cannot place there refuses by name.
"""

import numpy as np
import pytest

from pardnn.base.errors import UserError
from pardnn.emulator.trial import emulate
from pardnn.graph import CostGraph
from pardnn.graph.constraints import violations
from pardnn.pipeline import portfolio, workers
from pardnn.pipeline.judge import Judging, judge
from pardnn.pipeline.place import place
from pardnn.pipeline.report import evaluate
from pardnn.placers import registry

from helpers.placer_graphs import gpus_and_slow_host, mixed_cluster, one_cpu, training_like, two_hosts, two_towers

# name -> (graph builder, cluster builder): every entry applies to at least one
CASES = {
    "groups, a CPU pin; 2 GPUs + CPU": (training_like, mixed_cluster),
    "towers, CPU and GPU pins; 2 GPUs + CPU": (two_towers, mixed_cluster),
    "towers; two hosts": (two_towers, two_hosts),
    "towers; 2 GPUs + a slower host": (two_towers, gpus_and_slow_host),
    "groups, a CPU pin; one CPU": (training_like, one_cpu),
}


def applying():
    """(entry, case) for every registry entry and every case where it applies."""
    return [pytest.param(name, case, id=f"{name}: {case}") for name in registry.PLACERS for case, (g, c) in CASES.items()
            if registry.applies(name, g(), c())]


def run(name, graph, cluster):
    """Entry `name`'s placement as the pipeline asks for it (registry.run), lent the
    emulator when it judges its own trials."""
    lent = {"emulate": emulate} if registry.PLACERS[name].emulates else {}
    return registry.run(name, graph, cluster, {}, **lent)


def test_every_entry_is_checked_somewhere():
    checked = {values[0] for values in (p.values for p in applying())}
    assert checked == set(registry.PLACERS)


@pytest.mark.parametrize("name, case", applying())
def test_an_int_device_per_node_and_every_constraint_kept(name, case):
    graph_of, cluster_of = CASES[case]
    g, cluster = graph_of(), cluster_of()
    device = run(name, g, cluster)
    assert isinstance(device, np.ndarray) and device.dtype == np.int32
    assert device.shape == (g.num_nodes,)
    assert device.min() >= 0 and device.max() < cluster.num_devices
    for members in _groups(g):
        assert len(set(device[members].tolist())) == 1, [g.names[i] for i in members]
    kinds = np.array([d.kind for d in cluster.devices])
    for i in np.flatnonzero(np.asarray(g.pinned) != ""):
        assert kinds[device[i]] == g.pinned[i], g.names[i]
    assert violations(g, cluster, device) == []


@pytest.mark.parametrize("name, case", applying())
def test_the_same_answer_twice_and_in_a_worker_process(name, case, monkeypatch):
    graph_of, cluster_of = CASES[case]
    first = run(name, graph_of(), cluster_of())
    assert np.array_equal(run(name, graph_of(), cluster_of()), first)
    (one, here), (three, forked) = _built_here_and_in_a_worker(name, graph_of, cluster_of(), monkeypatch)
    assert isinstance(one, workers.Inline) and isinstance(three, workers.Forked)
    assert np.array_equal(here, first) and np.array_equal(forked, first)


@pytest.mark.parametrize("share", [0.7, 0.9])
@pytest.mark.parametrize("name, case", applying())
def test_memory_respected_or_refused_in_one_line(name, case, share):
    """At `share` of the memory per device that a placement needs on the roomy
    cluster (the most any device holds, the leaner of Step 1's and m-ETF's), the
    entry's placement repaired by the pipeline's judge and, for an entry that
    `--algorithm` names, `place`: every peak within capacity, or one line saying why
    not. (On these graphs most placements overflow there: the repair moves nodes, or
    no placement fits.)"""
    graph_of, cluster_of = CASES[case]
    g, roomy = graph_of(), cluster_of()
    tight = _tight(g, roomy, share)
    outcomes = [_fits_or_refuses(lambda: judge(g, tight, portfolio.build(g, tight, name)).profile.peak_bytes,
                                 tight)]
    if registry.PLACERS[name].algorithm:
        outcomes.append(_fits_or_refuses(lambda: place(g, tight, registry.PLACERS[name].algorithm)[1]
                                         .peak_memory_bytes, tight))
    assert all(outcomes)


def test_an_entry_that_cannot_place_on_devices_of_different_speeds_refuses_by_name():
    g, cluster = two_towers(), gpus_and_slow_host()
    refusing = [name for name, p in registry.PLACERS.items() if p.speeds is None]
    assert refusing                                             # (else this test checks nothing)
    for name in refusing:
        assert not registry.applies(name, g, cluster)
        with pytest.raises(UserError, match="--algorithm: .* cannot place on devices with rates"):
            run(name, g, cluster)


def test_an_empty_graph_gets_an_empty_placement():
    empty = CostGraph.build(names=[])
    for name in registry.PLACERS:
        if registry.applies(name, empty, mixed_cluster()):
            assert run(name, empty, mixed_cluster()).shape == (0,), name


def _groups(g) -> list:
    """The node indices of every colocation group of two or more nodes."""
    group = np.asarray(g.group)
    return [np.flatnonzero(group == k) for k in np.unique(group) if (group == k).sum() > 1]


def _tight(g, roomy, share):
    """`roomy` at `share` of the least of the highest peaks of two placements (Step 1's
    and m-ETF's), no reserve."""
    needed = min(max(evaluate(g, roomy, run(name, g, roomy)).peak_memory_bytes) for name in ("step1", "etf"))
    return roomy.with_options(memory=int(share * needed), reserve=0.0)


def _fits_or_refuses(peaks, cluster) -> bool:
    """True when `peaks()` are within capacity, or raise a UserError of one line."""
    try:
        return bool(np.all(np.asarray(peaks()) <= cluster.capacity))
    except UserError as exc:
        return "\n" not in str(exc) and str(exc) != ""


def _built_here_and_in_a_worker(name, graph_of, cluster, monkeypatch) -> list:
    """[(pool, device)]: entry `name` built and judged as the portfolio builds a
    candidate, on a graph of its own each time (placements are kept with their graph):
    once with one CPU (in this process), once with three (in a forked worker process)."""
    monkeypatch.setattr(workers, "PARALLEL_MIN_NODES", 0)
    built = []
    for cpus in (1, 3):
        monkeypatch.setattr(workers, "usable_cpus", lambda cpus=cpus: cpus)
        with workers.workers(Judging(graph_of(), cluster), [name], portfolio._build_and_judge,
                             portfolio._refine_in_worker) as pool:
            built.append((pool, pool.submit(name).result(timeout=None).device))
    return built

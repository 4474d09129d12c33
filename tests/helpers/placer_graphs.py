"""Small hand-made training graphs with colocation groups and pinned nodes, and the
clusters they are placed on, for the placers' tests (tests/test_baselines.py and the
contract every registered placer keeps, tests/test_placer_contract.py)."""

import numpy as np

from pardnn.graph import REFERENCE, RESIDUAL, CostGraph
from pardnn.hardware import Cluster, Device
from pardnn.hardware.cluster import Host

GiB = 2**30


def links(k, latency=5.0, bandwidth=1e3, hosts=None, between=(50.0, 1e2)):
    """(latency_us, bandwidth) tables of `k` devices: `latency` us and `bandwidth`
    bytes/us between any two, `between` between devices of different `hosts`."""
    lat, bw = np.full((k, k), latency), np.full((k, k), bandwidth)
    if hosts is not None:
        other = np.not_equal.outer(hosts, hosts)
        lat[other], bw[other] = between
    np.fill_diagonal(lat, 0.0)
    np.fill_diagonal(bw, np.inf)
    return lat, bw


def mixed_cluster(memory=GiB):
    """Two GPUs and a CPU, uniform 1 GB/s links with 5 us latency."""
    devices = (Device("/device:GPU:0", "GPU", memory), Device("/device:GPU:1", "GPU", memory),
               Device("/device:CPU:0", "CPU", memory))
    return Cluster(devices, *links(3))


def two_hosts(memory=GiB):
    """Two hosts of a GPU and a CPU each, the links between hosts slower."""
    hosts = (Host("/job:worker/task:0"), Host("/job:worker/task:1"))
    devices = tuple(Device(f"{hosts[h].task}/device:{kind}:0", kind, memory, host=h)
                    for h in (0, 1) for kind in ("GPU", "CPU"))
    return Cluster(devices, *links(4, hosts=[0, 0, 1, 1]), hosts=hosts)


def gpus_and_slow_host(memory=GiB):
    """Two GPUs and the host's CPU, which runs compute-bound ops at a quarter of their
    profiled speed and the others at half: devices of different speeds."""
    devices = (Device("/device:GPU:0", "GPU", memory), Device("/device:GPU:1", "GPU", memory),
               Device("/device:CPU:0", "CPU", memory, compute_rate=0.25, memory_rate=0.5, host_tier=True))
    return Cluster(devices, *links(3))


def one_cpu(memory=GiB):
    return Cluster((Device("/device:CPU:0", "CPU", memory),), *links(1))


def training_like():
    """A small training step: input -> two parallel branches -> loss, one
    variable group {var, read, apply} spanning the step (contracting it would
    make a cycle), and a CPU-pinned op whose group also holds its consumer."""
    names = ["input", "var", "read", "mm", "relu_a", "relu_b", "concat", "loss",
             "grad", "apply", "log", "log_sink"]
    comp = [1, 0, 0, 20, 8, 8, 2, 3, 20, 4, 1, 1]
    edges = [("input", "mm"), ("var", "read"), ("read", "mm"), ("mm", "relu_a"), ("mm", "relu_b"),
             ("relu_a", "concat"), ("relu_b", "concat"), ("concat", "loss"), ("loss", "grad"),
             ("read", "grad"), ("grad", "apply"), ("loss", "log"), ("log", "log_sink")]
    kind = [0] * 12
    kind[1], kind[2] = RESIDUAL, REFERENCE
    group = list(range(12))
    group[2] = group[9] = 1          # read and apply colocate with var
    group[11] = 10                   # log_sink colocates with log
    pinned = [""] * 12
    pinned[10] = "CPU"
    return CostGraph.build(names=names, comp_us=comp, out_bytes=[1000] * 12,
                           persist_bytes=[0, 4000] + [0] * 10, kind=kind, group=group, pinned=pinned,
                           edge_src=[a for a, _ in edges], edge_dst=[b for _, b in edges],
                           edge_bytes=[1000] * len(edges))


def two_towers():
    """Two towers of three layers joined at a loss, each layer's weights a variable
    group {w, read, apply} whose update follows the backward pass, the input pipeline
    pinned to the CPU (one group) and a GPU-pinned reduction of the two gradients."""
    names, comp, out, persist, kind, group, pinned, edges = [], [], [], [], [], [], [], []

    def node(name, us, nbytes=2000, keep=0, k=0, g=None, pin=""):
        names.append(name)
        comp.append(us), out.append(nbytes), persist.append(keep), kind.append(k), pinned.append(pin)
        group.append(len(group) if g is None else names.index(g))

    node("reader", 2, pin="CPU")
    node("decode", 3, g="reader", pin="CPU")
    edges.append(("reader", "decode"))
    for t in "ab":
        prev = "decode"
        for i in range(3):
            w = f"{t}{i}/w"
            node(w, 0, keep=6000, k=RESIDUAL)
            node(f"{t}{i}/read", 0, k=REFERENCE, g=w)
            node(f"{t}{i}/fwd", 10 + 3 * i + (t == "b"), nbytes=4000)
            edges += [(w, f"{t}{i}/read"), (f"{t}{i}/read", f"{t}{i}/fwd"), (prev, f"{t}{i}/fwd")]
            prev = f"{t}{i}/fwd"
    node("loss", 4)
    edges += [("a2/fwd", "loss"), ("b2/fwd", "loss")]
    grads = []
    for t in "ab":
        up = "loss"
        for i in reversed(range(3)):
            node(f"{t}{i}/bwd", 12 + 2 * i, nbytes=4000)
            node(f"{t}{i}/apply", 2, g=f"{t}{i}/w")
            edges += [(up, f"{t}{i}/bwd"), (f"{t}{i}/read", f"{t}{i}/bwd"), (f"{t}{i}/bwd", f"{t}{i}/apply")]
            up = f"{t}{i}/bwd"
        grads.append(up)
    node("allreduce", 5, pin="GPU")
    node("allreduce/done", 1, g="allreduce", pin="GPU")
    edges += [(grads[0], "allreduce"), (grads[1], "allreduce"), ("allreduce", "allreduce/done")]
    return CostGraph.build(names=names, comp_us=comp, out_bytes=out, persist_bytes=persist, kind=kind,
                           group=group, pinned=pinned, edge_src=[a for a, _ in edges],
                           edge_dst=[b for _, b in edges], edge_bytes=[out[names.index(a)] for a, _ in edges])

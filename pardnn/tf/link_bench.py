"""Timing TensorFlow transfers between every pair of devices (what `pardnn links` does).

For a pair (i, j) and a size s, a float32 resource variable of s bytes on i is read
and passed back and forth through Identity ops placed alternately on j and i, so
every hop is a real TF transfer (Send/Recv: a copy between GPUs, gRPC between
hosts), each waiting for the previous one. Two such chains are timed, of 2 and of
2 + H hops, both ending on i with a one-element slice that is fetched; the
difference of their fastest `session.run` times divided by H is the cost of one
transfer, with the step's fixed costs (the client round trip, starting each task's
partition, the fetch) cancelled out. The fastest run, not the median: other load on
the machine only ever adds time, and on a busy machine the minimum of repeated runs
is far steadier than the median. A chain goes both ways, so a pair's link is the
mean of its two directions. Nothing else runs during a timing; the first run of
each chain (which builds its executors) is not timed.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import pardnn.tf.quiet_import  # noqa: F401  (first: hides TensorFlow's start-up lines)
import tensorflow as tf

from pardnn.hardware.cluster import Device, Host, host_memory
from pardnn.hardware.link_fit import device_pairs
from pardnn.tf.distributed import connect, running_devices
from pardnn.tf.session import parse_profile_devices, session_config

tf1 = tf.compat.v1
SHORT_HOPS = 2


@dataclass
class Target:
    """Devices to time and how to open a session on them."""

    devices: list        # pardnn.hardware.cluster.Device
    hosts: list          # pardnn.hardware.cluster.Host
    open_session: object  # tf.Graph -> tf1.Session


def local_target(spec: str, memory=None, flag: str = "--local") -> Target:
    """The devices of this process: `cpu:K` virtual CPU devices or the visible GPUs."""
    cpus, gpus = parse_profile_devices(spec, flag)
    config = session_config(cpus, gpus)
    with tf1.Session(graph=tf.Graph(), config=config) as session:
        running = running_devices(session)
    devices = _pick(running, "GPU" if gpus else "CPU", memory)
    task = "/job:localhost/replica:0/task:0"
    return Target([Device(f"{task}/device:{kind}:{i}", kind, mem) for _, kind, i, mem in devices],
                  [Host(task)], lambda graph: tf1.Session(graph=graph, config=config))


def cluster_target(hosts, memory=None, timeout_s=10.0, flag="--workers") -> Target:
    """The devices of a running cluster [(task, address)]: each task's GPUs, or its CPUs
    when it has none."""
    with connect(hosts, tf.Graph(), timeout_s, flag) as session:
        running = running_devices(session)
    devices = []
    for h, (task, _) in enumerate(hosts):
        prefix = tf.DeviceSpec.from_string(task).replace(replica=0).to_string() + "/"
        mine = [d for d in running if d[0].startswith(prefix)]
        kind = "GPU" if any(d[1] == "GPU" for d in mine) else "CPU"
        devices += [Device(f"{task}/device:{kind}:{i}", kind, mem, h)
                    for _, kind, i, mem in _pick(mine, kind, memory)]
    return Target(devices, [Host(task, address) for task, address in hosts],
                  lambda graph: connect(hosts, graph, timeout_s, flag))


def _pick(running, kind, memory) -> list:
    """(name, kind, index, memory) of the running devices of `kind`. A CPU device's
    memory limit in TF is a nominal 256 MiB, so CPUs get `memory` or this machine's RAM."""
    out = []
    for name, dtype, limit in running:
        if dtype == kind:
            mem = memory if memory is not None else (limit if kind == "GPU" else host_memory())
            out.append((name, kind, int(name.rsplit(":", 1)[1]), int(mem)))
    return out


def measure(target: Target, sizes, repeats: int = 7, hops: int = 16, log=None) -> np.ndarray:
    """(pairs, sizes) array: microseconds per transfer for each pair of
    link_model.device_pairs(len(target.devices)) and each size in bytes."""
    graph, init, chains = build_chains([d.name for d in target.devices], sizes, hops)
    pairs = device_pairs(len(target.devices))
    hop_us = np.zeros((len(pairs), len(sizes)))
    with target.open_session(graph) as session:
        session.run(init)
        for p, (i, j) in enumerate(pairs):
            for s in range(len(sizes)):
                hop_us[p, s] = _hop_us(session, *chains[p, s], repeats, hops)
            if log:
                log(f"  timed {target.devices[i].name} <-> {target.devices[j].name}")
    return hop_us


def build_chains(names, sizes, hops):
    """(graph, init op, {(pair, size): (short chain tail, long chain tail)})."""
    graph = tf.Graph()
    chains = {}
    with graph.as_default():
        sources = {}
        for d, name in enumerate(names):
            for s, nbytes in enumerate(sizes):
                with tf.device(name):
                    sources[d, s] = tf1.get_variable(f"links/src_{d}_{s}", [max(int(nbytes) // 4, 1)],
                                                     initializer=tf1.zeros_initializer(), use_resource=True)
        for p, (i, j) in enumerate(device_pairs(len(names))):
            for s in range(len(sizes)):
                chains[p, s] = tuple(_chain(sources[i, s], names[i], names[j], n)
                                     for n in (SHORT_HOPS, SHORT_HOPS + hops))
        init = tf1.global_variables_initializer()
    return graph, init, chains


def _chain(variable, here, there, hops):
    with tf.device(here):
        x = variable.read_value()
    for h in range(hops):
        with tf.device(there if h % 2 == 0 else here):
            x = tf.identity(x)
    with tf.device(here):
        return x[:1]


def _hop_us(session, short, long, repeats, hops) -> float:
    """(fastest run of the long chain - fastest of the short one) / hops, in us; the
    two are run alternately so that drifts in the machine's load hit both alike."""
    session.run(short)                 # the first runs build the executors: not timed
    session.run(long)
    times = np.zeros((repeats, 2))
    for r in range(repeats):
        for c, fetch in enumerate((short, long)):
            t0 = time.perf_counter()
            session.run(fetch)
            times[r, c] = time.perf_counter() - t0
    fastest = times.min(axis=0)
    return float(fastest[1] - fastest[0]) * 1e6 / hops

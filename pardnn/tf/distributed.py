"""TensorFlow's distributed runtime: sessions on a cluster of `tf.distribute.Server`s.

pardnn builds no transport of its own. A multi-host cluster (pardnn.hardware.cluster_file)
names each host's task (`/job:worker/task:i`) and the `host:port` of its server;
placed graphs carry full device names on those tasks, and a session whose target is
the first task's server (`grpc://host:port`) runs them across every host.

Two things TF does not bound, and how they are bounded here:
- A master waits forever for a worker of its ClusterSpec that never answers
  (master.cc: "CreateSession still waiting for response from worker", with a TODO
  to add a timeout), holding the GIL. So before any session is made, every task's
  server is asked for its status over gRPC (WorkerService.GetStatus, the call the
  master itself makes) with a deadline, and the session's `device_filters` name only
  the cluster's tasks, so the master contacts no others.
- `operation_timeout_in_ms` bounds every later run.

`loopback_cluster` starts servers inside this process on 127.0.0.1 with free ports:
tests use it, and it is a way to try a multi-host placement on one machine. TF
offers no way to stop a server, so they live until the process exits.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass

import grpc

import pardnn.tf.quiet_import  # noqa: F401  (first: hides TensorFlow's start-up lines)
import tensorflow as tf

from pardnn.hardware.cluster_file import worker_task
from pardnn.base.errors import UserError
from pardnn.tf.session import session_config

tf1 = tf.compat.v1
DEFAULT_TIMEOUT_S = 10.0
GET_STATUS = "/tensorflow.WorkerService/GetStatus"   # GetStatusRequest is empty: b"" on the wire


@dataclass
class LoopbackCluster:
    servers: list
    addresses: list       # "127.0.0.1:port" of task 0, 1, ...

    @property
    def target(self) -> str:
        return self.servers[0].target


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def loopback_cluster(tasks: int = 2, cpus: int = 2) -> LoopbackCluster:
    """`tasks` servers of job "worker" in this process, each with `cpus` CPU devices."""
    addresses = [f"127.0.0.1:{free_port()}" for _ in range(tasks)]
    spec = tf.train.ClusterSpec({"worker": addresses})
    config = tf1.ConfigProto(device_count={"CPU": cpus})
    servers = [tf.distribute.Server(spec, job_name="worker", task_index=i, config=config, start=True)
               for i in range(tasks)]
    return LoopbackCluster(servers, addresses)


def hosts_of_addresses(addresses, flag="--workers") -> list:
    """(task, address) of `/job:worker/task:i` at the i-th address."""
    if not addresses:
        raise UserError(f"{flag}: no address given")
    out = []
    for i, address in enumerate(addresses):
        host, _, port = address.rpartition(":")
        if not host or not port.isdigit():
            raise UserError(f"{flag}: {address!r} is not host:port")
        out.append((worker_task(i), address))
    return out


def probe(hosts, timeout_s: float = DEFAULT_TIMEOUT_S, flag: str = "--workers") -> None:
    """UserError naming the first (task, address) whose TF server does not answer a
    WorkerService.GetStatus call within `timeout_s` seconds."""
    for task, address in hosts:
        if not address:
            raise UserError(f"{flag}: {task} has no address (host:port of its tf.distribute.Server)")
        try:
            with grpc.insecure_channel(address) as channel:
                channel.unary_unary(GET_STATUS)(b"", timeout=timeout_s)
        except grpc.RpcError as exc:
            raise UserError(f"{flag}: cannot reach worker {task} at {address} within {timeout_s:g} s "
                            f"({_reason(exc)}); is its tf.distribute.Server running?") from None


def _reason(exc) -> str:
    if exc.code() == grpc.StatusCode.UNIMPLEMENTED:
        return "something answers there, but not a TensorFlow server"
    if exc.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
        return "no answer"
    return (exc.details() or str(exc.code())).rsplit(": ", 1)[-1].strip(" ]")


def cluster_config(tasks, timeout_s: float = DEFAULT_TIMEOUT_S):
    """pardnn's session config (pardnn.tf.session) for a session on `tasks` only,
    with its own variables (isolate_session_state) and every run bounded."""
    config = session_config()
    config.ClearField("device_count")
    config.device_filters.extend(tasks)
    config.isolate_session_state = True
    config.operation_timeout_in_ms = int(timeout_s * 1000)
    return config


def connect(hosts, graph=None, timeout_s: float = DEFAULT_TIMEOUT_S, flag: str = "--workers"):
    """A tf1.Session on the cluster of `hosts` [(task, address)], through the first
    task's server, after probing every address."""
    probe(hosts, timeout_s, flag)
    return tf1.Session(f"grpc://{hosts[0][1]}", graph=graph,
                       config=cluster_config([task for task, _ in hosts], timeout_s))


def running_devices(session) -> list:
    """(canonical device name, device type, memory limit in bytes) the session sees."""
    return [(tf.DeviceSpec.from_string(d.name).to_string(), d.device_type, int(d.memory_limit_bytes))
            for d in session.list_devices()]


def check_devices(cluster, running, source: str) -> None:
    """UserError naming the first device of `cluster` the running cluster lacks."""
    have = {name for name, _, _ in running}
    for device in cluster.devices:
        want = tf.DeviceSpec.from_string(device.name).replace(replica=0).to_string()
        if want not in have:
            task = want.rsplit("/device:", 1)[0]
            there = sorted(n.rsplit("/device:", 1)[1] for n in have if n.startswith(task + "/"))
            raise UserError(f"{source}: lists {device.name}, but the running cluster has no such device "
                            f"({task} has {', '.join(there) or 'no devices'})")


def open_session(cluster, graph=None, timeout_s: float = DEFAULT_TIMEOUT_S, flag: str = "--devices"):
    """A session on the running cluster that `cluster` (a multi-host pardnn Cluster
    with addresses) describes, checked to have every device it lists."""
    hosts = [(h.task, h.address) for h in cluster.hosts]
    session = connect(hosts, graph, timeout_s, flag)
    try:
        check_devices(cluster, running_devices(session), f"{flag} {cluster.preset or 'cluster'}")
    except BaseException:
        session.close()
        raise
    return session

"""Multi-host placement on synthetic training graphs: flat ParDNN against the
hierarchical placer, and the cost of the `--replicas` step-time estimate.

    python -m tools.bench_multihost --nodes 20000 --devices 2xdgx-h100:4,4xdgx-h100:2
    python -m tools.bench_multihost --nodes 200000 --devices 2xdgx-h100 --replicas 2

Prints, per cluster: emulated makespan, bytes crossing hosts and placement seconds of
`pardnn` and `pardnn-hier`; then the seconds `replicas.estimate` takes for R replicas
of the per-replica placement (building the replicated cost graph and emulating it).
"""

import argparse
import time

from tools.synth_graph import synth_graph

from pardnn.pipeline import place as placer
from pardnn.pipeline import replicas
from pardnn.hardware import parse_devices
from pardnn.hardware.hosts import host_cluster
from pardnn.base.units import format_size, format_time
from tools.commit_line import print_commit


def cross_host_bytes(graph, cluster, device) -> int:
    host = cluster.host_of[device]
    return int(graph.edge_bytes[host[graph.edge_src] != host[graph.edge_dst]].sum())


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=20000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--devices", default="2xdgx-h100:4,4xdgx-h100:2")
    ap.add_argument("--replicas", type=int, default=2)
    args = ap.parse_args()
    print_commit()
    t0 = time.perf_counter()
    graph = synth_graph(args.nodes, seed=args.seed)
    print(f"{graph.num_nodes} nodes, {graph.num_edges} edges, work {format_time(graph.total_work_us())} "
          f"(built in {time.perf_counter() - t0:.1f} s)")
    for spec in args.devices.split(","):
        cluster = parse_devices(spec)
        for name in ("pardnn", "pardnn-hier"):
            placement, report = placer.place(graph, cluster, name)
            report = report.to_json()
            print(f"{spec:>14} {name:<12} makespan {format_time(report['makespan_us']):>11}  "
                  f"across hosts {format_size(cross_host_bytes(graph, cluster, placement.device)):>11}  "
                  f"hosts used {len(set(cluster.host_of[placement.device].tolist()))}  "
                  f"placed in {report['placement_seconds']:.2f} s")
        one = host_cluster(cluster, 0)
        placement, report = placer.place(graph, one, "pardnn")
        report = report.to_json()
        t1 = time.perf_counter()
        block = replicas.estimate(graph, placement.device, cluster, args.replicas, report["makespan_us"])
        extra = block["step_time_us"] - block["per_replica_makespan_us"]
        print(f"{spec:>14} {args.replicas} replicas: step {format_time(block['step_time_us'])} "
              f"(one replica {format_time(block['per_replica_makespan_us'])}, all-reduce adds "
              f"{format_time(extra)}), "
              f"{block['averaged_tensors']} tensors / {format_size(block['allreduce_bytes'])} averaged; "
              f"estimate took {time.perf_counter() - t1:.2f} s")


if __name__ == "__main__":
    main()

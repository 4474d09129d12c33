"""What the step views add to `pardnn place` on a large graph (docs/views.md).

    python -m tools.bench_views [--nodes 200000] [--devices cpu:8] [--placer etf] [--repeat 1]

Builds a synthetic training-like graph (tools/synth_graph.py), places it with one
placer, and prints the best-of-N wall time of each part of writing trace.json and
tensorboard/ as `pardnn place` does for a cost-graph JSON input: the emulation again,
the critical path, the trace's events, writing them, the GraphDef made from the cost
graph and its event file; and the sizes of both files.
"""

import argparse
import os
import sys
import tempfile


from tools.bench_emulator import best_of
from tools.synth_graph import synth_graph

from pardnn.emulator.critical_path import critical_path
from pardnn.emulator.memory import track_memory
from pardnn.emulator.scheduler import simulate
from pardnn.hardware import parse_devices
from pardnn.io.tensorboard_graph import EVENT_FILE, graph_def_bytes, write_graph_logdir
from pardnn.emulator.trace import emulated_step
from pardnn.io.trace_events import write_trace
from pardnn.placers import registry as algorithms
from tools.commit_line import print_commit


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nodes", type=int, default=200_000)
    p.add_argument("--devices", default="cpu:8")
    p.add_argument("--placer", default="etf")
    p.add_argument("--repeat", type=int, default=1)
    args = p.parse_args(argv)
    print_commit()
    graph = synth_graph(args.nodes, seed=0)
    cluster = parse_devices(args.devices)
    device = algorithms.get(args.placer)(graph, cluster, {})
    print(f"graph: {graph.num_nodes} nodes, {graph.num_edges} edges; {args.placer} on {args.devices}; "
          f"best of {args.repeat}")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        trace, logdir = os.path.join(tmp, "trace.json"), os.path.join(tmp, "tensorboard")
        t, schedule = best_of(args.repeat, lambda: simulate(graph, cluster, device))
        rows.append(("emulate again", t))
        t, profile = best_of(args.repeat, lambda: track_memory(graph, cluster, device, schedule))
        rows.append(("memory timeline", t))
        rows.append(("critical path", best_of(args.repeat, lambda: critical_path(graph, device, schedule))[0]))
        t, events = best_of(args.repeat, lambda: list(emulated_step(graph, cluster, device, schedule, profile)))
        rows.append((f"trace events ({len(events)}, incl. critical path)", t))
        rows.append(("write trace.json", best_of(args.repeat, lambda: write_trace(trace, events))[0]))
        t, graph_def = best_of(args.repeat, lambda: graph_def_bytes(graph, cluster.names, device))
        rows.append(("GraphDef from the cost graph", t))
        rows.append(("write the event file", best_of(args.repeat, lambda: write_graph_logdir(logdir, graph_def))[0]))
        sizes = os.path.getsize(trace) / 1e6, os.path.getsize(os.path.join(logdir, EVENT_FILE)) / 1e6
    for label, seconds in rows:
        print(f"  {label:<45} {seconds:>7.2f} s")
    print(f"  {'all (the critical path is inside the events)':<45} "
          f"{sum(s for label, s in rows if label != 'critical path'):>7.2f} s")
    print(f"trace.json {sizes[0]:.1f} MB, event file {sizes[1]:.1f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())

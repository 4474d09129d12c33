"""How close the emulator comes to the real thing (issue #3, item 5).

    python -m tools.emulator_accuracy [--families mlp,word-rnn] [--size small] [--devices 4]
                                      [--steps 5] [--work /tmp/pardnn-accuracy]

For each family: profile on cpu:1 (`pardnn profile`), place on cpu:K (`pardnn place`,
ParDNN), then run the placed graph on K virtual CPU devices and measure the wall time of
a training step (median over --steps after one warm-up) — also for the unplaced graph
on one device. Prints emulated vs measured step time for both. Then asks Grappler's
`DeterminePeakMemoryUsage` for each device's peak on the placed graph (an analysis
independent of ours) and prints our emulated peaks against it with the relative error.
"""

import argparse
import json
import os
import statistics
import sys
import time


import pardnn.tf.quiet_import
import tensorflow as tf

from tools.bench_repair import grappler_peaks
from pardnn.cli import main as pardnn
from pardnn_builtin_models import load_module
from pardnn.tf import import_placed_graph, session_config
from pardnn.base.units import format_size, format_time
from tools.commit_line import print_commit

tf1 = tf.compat.v1


def step_times(graph, model, devices, steps):
    """Median wall time (us) of a training step of `graph` on `devices` CPU devices."""
    with tf1.Session(graph=graph, config=session_config(devices)) as session:
        session.run(model.init)
        session.run(model.train_op, model.feed(0) if model.feed else None)       # warm-up
        times = []
        for step in range(1, steps + 1):
            feed = model.feed(step) if model.feed else None
            t0 = time.perf_counter()
            session.run(model.train_op, feed)
            times.append((time.perf_counter() - t0) * 1e6)
    return statistics.median(times)


def measure(family, size, k, steps, work):
    prof, placed = os.path.join(work, f"{family}-prof"), os.path.join(work, f"{family}-placed")
    if not os.path.isdir(prof):
        assert pardnn(["profile", family, "--size", size, "--devices", "cpu:1", "--steps", str(steps),
                       "-o", prof]) == 0
    assert pardnn(["place", prof, "--devices", f"cpu:{k}", "-o", placed]) == 0
    report = json.load(open(os.path.join(placed, "report.json")))
    meta = json.load(open(os.path.join(prof, "profile.json")))
    model = load_module(family).build(**meta["knobs"])
    single = step_times(model.graph, model, 1, steps)
    graph = tf.Graph()
    with graph.as_default():
        import_placed_graph(os.path.join(placed, "placed_graph.pb"))
    multi = step_times(graph, model, k, steps)
    peaks = grappler_peaks(os.path.join(placed, "placed_graph.pb"), report["devices"], prof)
    return report, single, multi, peaks


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--families", default="mlp,word-rnn,transformer")
    p.add_argument("--size", default="tiny")
    p.add_argument("--devices", type=int, default=4)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--work", default="/tmp/pardnn-accuracy")
    args = p.parse_args(argv)
    print_commit()
    os.makedirs(args.work, exist_ok=True)
    for family in args.families.split(","):
        report, single, multi, peaks = measure(family, args.size, args.devices, args.steps, args.work)
        print(f"\n== {family} ({args.size}), {report['num_nodes']} nodes, cpu:{args.devices}")
        print(f"  one device: emulated {format_time(report['single_device_us'])}, measured {format_time(single)}"
              f" (ratio {report['single_device_us'] / single:.2f})")
        print(f"  placed:     emulated {format_time(report['makespan_us'])}, measured {format_time(multi)}"
              f" (ratio {report['makespan_us'] / multi:.2f})")
        for d, name in enumerate(report["devices"]):
            ours, theirs = report["peak_memory_bytes"][d], peaks.get(name, 0)
            err = f"{(ours - theirs) / theirs:+.0%}" if theirs else "n/a"
            print(f"  {name.rsplit('/', 1)[-1]}: emulated peak {format_size(ours):>11}  "
                  f"Grappler {format_size(theirs):>11}  error {err}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

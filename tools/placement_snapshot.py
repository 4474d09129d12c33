"""Fingerprints of placements, to show that a speed change moved no node: one line per
(graph, K, memory, algorithm) with a hash of the device of every node and the step.

    python -m tools.placement_snapshot > before.txt      # at the old commit
    python -m tools.placement_snapshot > after.txt       # at the new one
    diff before.txt after.txt                            # nothing: the same placements

The graphs are tools/synth_graph.py's (a 3k DAG, a 3k near-chain, a 20k DAG and a 1k
near-chain), on K = 2, 4, 8, 16 CPUs over 12 GB/s, 25 us links, with unlimited memory
and 0.6x and 0.3x of each graph's emulated one-device peak: 192 placements for the four
default algorithms, about three minutes on two cores.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys

import numpy as np


from tools.commit_line import print_commit
from tools.synth_graph import synth_graph

from pardnn.pipeline.report import evaluate
from pardnn.base.errors import UserError
from pardnn.hardware import parse_devices
from pardnn.pipeline.place import place

HERE = os.path.dirname(os.path.abspath(__file__))

GRAPHS = (("dag3k", 3000, 1, "dag"), ("chain3k", 3000, 2, "chain"), ("dag20k", 20000, 3, "dag"),
          ("chain1k", 1000, 4, "chain"))


def one_device_peak(graph) -> int:
    one = parse_devices("cpu:1").with_options(memory=2**50)
    return int(evaluate(graph, one, np.zeros(graph.num_nodes, np.int32)).peak_memory_bytes[0])


def fingerprint(graph, cluster, algorithm) -> str:
    """`hash step_us` of the placement, or `ERR` and the first words of why none fits."""
    try:
        placement, report = place(graph, cluster, algorithm)
        report = report.to_json()
    except UserError as exc:
        return f"ERR {str(exc)[:60]}"
    digest = hashlib.sha1(np.asarray(placement.device, np.int32).tobytes()).hexdigest()[:12]
    return f"{digest} {round(report['makespan_us'], 3)}"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--algorithms", default="pardnn,pardnn-hier,etf,heft")
    args = parser.parse_args(argv)
    print_commit()
    for name, nodes, seed, shape in GRAPHS:
        graph = synth_graph(nodes, seed=seed, shape=shape)
        peak = one_device_peak(graph)
        for k in (2, 4, 8, 16):
            for fraction in (None, 0.6, 0.3):
                memory = 2**50 if fraction is None else int(fraction * peak)
                cluster = parse_devices(f"cpu:{k}").with_options(memory=memory, bandwidth=12000.0, latency=25.0)
                for algorithm in args.algorithms.split(","):
                    print(name, k, fraction, algorithm, fingerprint(graph, cluster, algorithm), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

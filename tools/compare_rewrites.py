"""Profiles with Grappler's rewrites off vs on, per built-in family (tiny by default).

For each family: profile `--rewrites off` and `--rewrites on` (same steps), load
both, and print the total compute time, how many nodes were untimed and how many got
a share of a fused kernel's time, the median per-op ratio on over off (ops timed in
both), and the emulated makespan of a `pardnn` placement on cpu:4 of each profile.

    python -m tools.compare_rewrites [--size tiny] [--steps 3] [--families mlp,wrn]
"""

import argparse
import os
import tempfile


import numpy as np

import pardnn.tf.quiet_import  # noqa: F401  (quiet TensorFlow import first)
from pardnn.hardware import parse_devices
from pardnn.models import resolve_knobs
from pardnn_builtin_models import load_module
from pardnn.pipeline.place import place
from pardnn.tf import load_profile
from pardnn.tf.profiling import profile_model
from tools.commit_line import print_commit

FAMILIES = "mlp,word-rnn,char-crn,wrn,transformer,e3d"


def measure(family, size, steps, rewrites, root):
    module = load_module(family)
    model = module.build(**resolve_knobs(module, size))
    out = os.path.join(root, f"{family}-{'on' if rewrites else 'off'}")
    profile_model(model, steps, "cpu:1", out, rewrites=rewrites)
    graph, info = load_profile(out)
    report = place(graph, parse_devices("cpu:4"), "pardnn")[1].to_json()
    return graph, info, report["makespan_us"]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", default="tiny")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--families", default=FAMILIES)
    args = p.parse_args()
    print_commit()
    print("| family | rewrites | total compute us | untimed | fused, time spread | "
          "median op ratio on/off | makespan cpu:4 us |")
    print("|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as root:
        for family in args.families.split(","):
            off, info_off, span_off = measure(family, args.size, args.steps, False, root)
            on, info_on, span_on = measure(family, args.size, args.steps, True, root)
            ix = on.index()
            both = [(i, ix[n]) for i, n in enumerate(off.names) if n in ix]
            a = np.array([off.comp_us[i] for i, _ in both])
            b = np.array([on.comp_us[j] for _, j in both])
            keep = (a > 0) & (b > 0)
            ratio = float(np.median(b[keep] / a[keep])) if keep.any() else float("nan")
            for label, g, info, span, r in (("off", off, info_off, span_off, "1"),
                                            ("on", on, info_on, span_on, f"{ratio:.2f}")):
                print(f"| {family} | {label} | {g.comp_us.sum():.0f} | {info['untimed_nodes']} | "
                      f"{info.get('fused_timed_nodes', 0)} | {r} | {span:.0f} |")


if __name__ == "__main__":
    main()

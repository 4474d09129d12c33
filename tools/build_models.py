"""Build every named config of the built-in model families; print nodes, edges, build time.

    python -m tools.build_models                      # every family, every size
    python -m tools.build_models wrn --sizes thesis   # one family, one size
    python -m tools.build_models --markdown           # the table for README / docs/models.md

Nodes are the NodeDefs of the full training graph (forward, loss, gradients,
optimizer, initialisers); edges are all node inputs, data and control. Build time
is the wall and CPU time of `build(**knobs)` alone (TensorFlow already imported;
CPU time is the honest number on a machine shared with other jobs). Where
the family gives the thesis' node count for a size (THESIS_NODES, thesis Table
5.1), the ratio ours/thesis is printed too.
"""

import argparse
import gc
import sys
import time


import pardnn.tf.quiet_import  # noqa: F401  (quiet TensorFlow import first)

from pardnn.models import resolve_knobs
from pardnn_builtin_models import FAMILIES, load_module
from tools.commit_line import print_commit


_PLAIN = "{:<12} {:<9} {:>8} {:>8} {:>8} {:>6} {:>12} {:>11}"


def measure(family: str, size: str) -> dict:
    """Build one named config; its node and edge counts and build seconds."""
    module = load_module(family)
    knobs = resolve_knobs(module, size)
    wall, cpu = time.perf_counter(), time.process_time()
    model = module.build(**knobs)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    nodes = model.graph.as_graph_def().node
    thesis = getattr(module, "THESIS_NODES", {}).get(size)
    return {"family": family, "size": size, "nodes": len(nodes),
            "edges": sum(len(n.input) for n in nodes), "wall": wall, "cpu": cpu, "thesis": thesis}


def row_text(row: dict, markdown: bool) -> str:
    thesis = "" if row["thesis"] is None else f"{row['thesis']}"
    ratio = "" if row["thesis"] is None else f"{row['nodes'] / row['thesis']:.2f}"
    cells = [row["family"], row["size"], str(row["nodes"]), str(row["edges"]), thesis, ratio,
             f"{row['wall']:.1f}", f"{row['cpu']:.1f}"]
    if markdown:
        return "| " + " | ".join(cells) + " |"
    return _PLAIN.format(*cells)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("families", nargs="*", default=list(FAMILIES), help="families (default: all)")
    parser.add_argument("--sizes", help="comma-separated size names (default: all of each family)")
    parser.add_argument("--markdown", action="store_true", help="print a markdown table")
    args = parser.parse_args(argv)
    print_commit()
    header = ["family", "size", "nodes", "edges", "thesis", "ratio", "build_wall_s", "build_cpu_s"]
    if args.markdown:
        print("| " + " | ".join(header) + " |\n|" + "---|" * len(header))
    else:
        print(_PLAIN.format(*header))
    for family in args.families:
        sizes = getattr(load_module(family), "SIZES", {})
        for size in args.sizes.split(",") if args.sizes else sizes:
            if size in sizes:
                print(row_text(measure(family, size), args.markdown), flush=True)
                gc.collect()
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""`pardnn explain PLACED_DIR [--top N] [--json F] [--html F]`: why a placement is as
fast and as full as it is, by the model's layers (pardnn.explain, docs/explain.md).

PLACED_DIR is a `pardnn place` output folder: its inputs.json names the profile and
the cluster flags, so the step report.json describes is emulated again (and checked
against it) before it is explained. `pardnn place --explain` prints the same at its end.
"""

import argparse
import os
from types import SimpleNamespace

from pardnn.commands.common import budget_from_args, check_output_files, write_all_or_nothing
from pardnn.base.errors import UserError
from pardnn.explain import explain
from pardnn.explain.placed import Emulated, open_placed, placed_cluster, read_inputs
from pardnn.explain.terminal import print_explanation
from pardnn.base.jsonfile import write_json
from pardnn.base.progress import stage


def add_parser(sub):
    p = sub.add_parser("explain", help="why a placement is as fast and as full as it is, by layer",
                       description="Explain a `pardnn place` output: the bound that binds, the critical path "
                                   "and each device's memory peak by layer, and what would help (each emulated).")
    p.add_argument("placed", metavar="PLACED_DIR", help="a `pardnn place` output folder")
    p.add_argument("--top", type=int, default=5, metavar="N", help="rows per list (default 5)")
    p.add_argument("--json", metavar="FILE", help="write the whole explanation here as JSON")
    p.add_argument("--html", metavar="FILE", help="write it here as one HTML page with the timeline and "
                                                  "memory plots inside")
    p.add_argument("--profile", metavar="PROFILE", help="where the profile it was placed from is now "
                                                        "(default: the path inputs.json records)")
    p.add_argument("--place-again", action=argparse.BooleanOptionalAction, default=None,
                   help="compute one device more and fewer by placing the graph again (default: on graphs "
                        "of at most 2,000 nodes)")
    p.add_argument("--depth", type=int, metavar="D",
                   help="cut layers at scope depth D (default: one, deeper inside a scope holding most nodes)")
    p.set_defaults(run=run)


def run(args):
    if args.top < 1:
        raise UserError(f"--top: must be at least 1, got {args.top}")
    if args.depth is not None and args.depth < 1:
        raise UserError(f"--depth: must be at least 1, got {args.depth}")
    inputs = read_inputs(args.placed)
    given = [path for path in (args.profile or inputs["profile"], inputs["devices"]) if os.path.exists(path)]
    check_output_files([args.placed, *given], **{"--json": args.json, "--html": args.html})
    with stage(f"emulating {args.placed} again"):
        placed = open_placed(args.placed, inputs, placed_cluster(args.placed, inputs), args.profile)
    with stage("explaining"):
        explanation = explain(placed, args.top, args.place_again, args.depth, _budget(inputs))
    write_all_or_nothing([(path, write) for path, write in (
        (args.json, lambda path: write_json(explanation, path)),
        (args.html, lambda path: _write_html(explanation, placed, args.top, path))) if path])
    print_explanation(explanation, args.top)
    return 0


def explain_placement(out_dir, graph, info, placement, report, inputs, top=5):
    """`pardnn place --explain`: the explanation of the placement just written to
    `out_dir`, from the emulation its report was made of."""
    placed = Emulated(graph, placement.cluster, placement.device.astype("int64"), placement.schedule,
                    placement.profile, report, inputs, info.get("profile"))
    with stage("explaining"):
        explanation = explain(placed, top, None, None, _budget(inputs))
    print()
    print_explanation(explanation, top)


def _budget(inputs):
    """The --time-budget the placement had, in seconds (None: none)."""
    return budget_from_args(SimpleNamespace(time_budget=inputs.get("time_budget")))


def _write_html(explanation, placed, top, path):
    from pardnn.explain.page import write_page
    write_page(explanation, placed, top, path)

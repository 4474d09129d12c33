"""`pardnn run PLACED_DIR --steps N`: train a placed graph on its devices.

Prints the loss of every step, how many nodes ran on each device (from the
partition graphs of the first step), the memory each device allocated during that
step (its allocation records) and how many nodes TF ran somewhere other than
requested. Exit code 0 even when TF moved nodes: the count says so. `--config
default` runs with TF's default session config (Grappler on), as a user's own
training script would; `--config pardnn` (the default) with pardnn's. `--trace FILE`
writes the last step as TF ran it, a trace with the track names of the emulated
step's trace.json (pardnn.tf.step_trace), to open beside it.
"""

import os

from pardnn.commands.common import check_output_file


def add_parser(sub):
    p = sub.add_parser("run", help="train a placed graph for a few steps and check the placement",
                       description="Import PLACED_DIR/placed_graph.pb and train it on its devices.")
    p.add_argument("placed", metavar="PLACED_DIR", help="output directory of `pardnn place`")
    p.add_argument("--steps", type=int, default=3, metavar="N", help="training steps (default 3)")
    p.add_argument("--config", choices=("pardnn", "default"), default="pardnn",
                   help="session config: pardnn's (graph rewriting off, soft placement on; default) "
                        "or TF's default (Grappler on), as in your own training script")
    p.add_argument("--trace", metavar="JSON", help="write the last step as TF ran it as a trace "
                                                   "(beside PLACED_DIR/trace.json, the emulated one)")
    p.set_defaults(run=run)


def run(args):
    check_output_file("--trace", args.trace, inputs=[args.placed])
    from pardnn.tf.allocations import HOST
    from pardnn.tf.run import run_placed
    from pardnn_builtin_models import load_module
    from pardnn.base.units import format_size
    from pardnn.io.trace_events import write_trace

    result = run_placed(args.placed, load_module, args.steps, args.config, trace=bool(args.trace))
    print(f"session config: {args.config}")
    for step, loss in enumerate(result.losses):
        print(f"step {step}: loss {loss:.6f}")
    check = result.check
    print(f"nodes run per device ({check.num_run} in all):")
    for device, count in check.nodes_per_device.items():
        print(f"  {device}: {count}")
    print("memory allocated during the first step by the ops of each device (TF allocation records; "
          "variables and optimizer slots, allocated before it, are not counted):")
    for device, peak in check.step_peak_bytes.items():
        if device != HOST:
            print(f"  {device}: peak {format_size(peak)} ({peak} B)")
    if HOST in check.step_peak_bytes:
        peak = check.step_peak_bytes[HOST]
        print(f"  the CPU devices share one host allocator, whose peak was {format_size(peak)} ({peak} B); "
              f"the per-device figures are its ops' shares, not separate memories")
    print(f"nodes TensorFlow moved from their requested device: {len(check.moved)}")
    for node, want, actual in check.moved[:10]:
        print(f"  {node}: asked {want}, ran on {actual}")
    if args.trace:
        write_trace(args.trace, result.trace, {"pardnn": "measured step", "placed": os.path.abspath(args.placed),
                                               "step": args.steps - 1, "config": args.config})
        print(f"wrote {args.trace}: step {args.steps - 1} as TensorFlow ran it")
    return 0

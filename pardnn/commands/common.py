"""Options shared by the commands that need a cluster or a profile."""

import os

from pardnn.base.errors import UserError
from pardnn.hardware import cluster_from_flags
from pardnn.base.units import MAX_TIME_US, format_size, parse_time
from pardnn.repair.least_memory import least_memory_on


def add_cluster_args(parser, required=True):
    parser.add_argument("--devices", required=required, metavar="SPEC",
                        help="preset (dgx1-v100, dgx2, dgx-a100, dgx-h100), cpu:K, gpu:K or a count; "
                             "PRESET+host adds the host's CPU and memory as a device (e.g. dgx-h100+host)")
    parser.add_argument("--memory", metavar="SIZE",
                        help="memory per accelerator, e.g. 32GiB (overrides the preset; not the host's)")
    parser.add_argument("--host-memory", metavar="SIZE",
                        help="memory of the host device that +host adds, e.g. 1TiB (overrides the preset)")
    parser.add_argument("--reserve", type=float,
                        help="fraction of each device's memory kept free (default: a cluster file's, "
                             "else 0.10)")
    parser.add_argument("--bandwidth", metavar="RATE", help="link bandwidth for every device pair, e.g. 300GB/s")
    parser.add_argument("--latency", metavar="TIME", help="link latency for every device pair, e.g. 25us")


def add_budget_arg(parser):
    parser.add_argument("--time-budget", metavar="TIME",
                        help="a cap on the wall time pardnn may spend on candidates after Step 1 and on "
                             "refinement within memory: 90s, 1500ms, or plain seconds. Default: none, so "
                             "the placement never depends on the machine's speed; with a cap it may")


def budget_from_args(args):
    """--time-budget in seconds, None when not given; UserError unless it is positive."""
    if args.time_budget is None:
        return None
    text = str(args.time_budget).strip()
    seconds = _plain_number(text)
    if seconds is None:
        seconds = parse_time(text, "--time-budget") / 1e6
    if not 0 < seconds * 1e6 <= MAX_TIME_US:          # at most a day, as any time pardnn reads
        raise UserError(f"--time-budget: must be more than 0 and at most a day, got {args.time_budget!r}")
    return seconds


def _plain_number(text):
    """The number `text` spells without a unit (12, 1.5, 1e3), else None."""
    try:
        return float(text)
    except ValueError:
        return None


def cluster_from_args(args):
    return cluster_from_flags(args.devices, args.memory, args.reserve, args.bandwidth, args.latency,
                              args.host_memory)


RECOMPUTE = ("auto", "on", "off")


def add_recompute_arg(parser) -> None:
    parser.add_argument("--recompute", default="auto", choices=RECOMPUTE,
                        help="auto (default): when nothing fits, recompute activations in the backward pass "
                             "instead of keeping them; on: always (where it fits); off: never")


def add_memory_order_arg(parser, choices=RECOMPUTE) -> None:
    on = "; on: whenever one fits" if "on" in choices else ""
    parser.add_argument("--memory-order", default="auto", choices=choices,
                        help=f"auto (default): when nothing fits, run the big gradient sums (then the optimizer's "
                             f"updates) one after another, carried as control edges{on}; off: never")


def add_fetch_arg(parser) -> None:
    parser.add_argument("--host-fetch", default="auto", choices=RECOMPUTE,
                        help="with a host tier (PRESET+host): auto (default) reads the weights kept on the host "
                             "just before their layer, again for the backward pass, when the placement without "
                             "it runs MatMuls on the host and the step is shorter; on: always; off: never")


def refuse_below_least_memory(graph, cluster, args) -> None:
    """UserError, before any placement, when the devices' usable memory (memory minus
    the reserve) is below what every placement needs (pardnn.repair.least_memory),
    naming the flag, the bound and what binds it; with `--recompute auto`, the bounds
    that hold whatever is recomputed. Beside a host tier, the usable memory named is
    the other devices' (what --memory sets)."""
    need = least_memory_on(graph, cluster)
    if getattr(args, "recompute", "off") != "off":
        need = need.recomputing()
    why = need.shortfall(cluster.capacity)
    if why:
        flag = "--memory" if args.memory is not None else "--devices"
        host = {d for d, _ in need.host_tier}
        usable = format_size(max(int(c) for d, c in enumerate(cluster.capacity) if d not in host))
        raise UserError(f"{flag}: {usable} usable per device (memory minus the {cluster.reserve:.0%} "
                        f"reserve) is too little for any placement, which needs {why}")


def cluster_inputs(args) -> list:
    """The cluster file `--devices` names, if it names one: an input no output may replace."""
    return [args.devices] if args.devices and os.path.isfile(args.devices) else []


def check_output_files(inputs, **paths) -> None:
    """`check_output_file` for each given flag's path (flag name -> path or None), and
    UserError when two flags name the same file (one would overwrite the other)."""
    seen = {}
    for flag, path in paths.items():
        check_output_file(flag, path, inputs)
        if path is None:
            continue
        full = os.path.realpath(path)
        if full in seen:
            raise UserError(f"{flag}: {path} is also {seen[full]}'s file; name another file")
        seen[full] = flag


def check_output_file(flag, path, inputs=()) -> None:
    """UserError unless an output file can go to `path` (None: the flag was not given):
    its folder exists, it is not a folder, and it is none of the `inputs` (files or
    folders) nor inside one of them. Checked before the real work, so a bad path fails fast."""
    if path is None:
        return
    if not path:
        raise UserError(f"{flag}: empty path; name a file")
    if not os.path.isdir(os.path.dirname(os.path.abspath(path))):
        raise UserError(f"{flag}: directory of {path} does not exist")
    if os.path.isdir(path):
        raise UserError(f"{flag}: {path} is a directory; name a file")
    full = os.path.realpath(path)
    for item in inputs:
        if os.path.commonpath([full, os.path.realpath(str(item))]) == os.path.realpath(str(item)):
            raise UserError(f"{flag}: {path} would overwrite or go into the input {item}; name another file")


def write_all_or_nothing(writers) -> None:
    """Write each (path, write) pair, `write(temporary_path)`, through a temporary file
    beside `path`; rename them into place only when all were written, else remove them."""
    pending = []
    try:
        for path, write in writers:
            pending.append((f"{path}.tmp{os.getpid()}", path))
            write(pending[-1][0])
    except BaseException:
        for tmp, _ in pending:
            if os.path.exists(tmp):
                os.remove(tmp)
        raise
    for tmp, final in pending:
        os.replace(tmp, final)

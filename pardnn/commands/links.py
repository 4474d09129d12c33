"""`pardnn links (--local cpu:K|gpu | --workers HOST:PORT,... | --cluster FILE) -o CLUSTER.json`:
measure the link model instead of guessing it.

Times TF transfers of several sizes between every device pair (pardnn.tf.link_bench),
fits `latency + bytes / bandwidth` per pair (pardnn.hardware.link_fit), prints the fitted
matrices and how well the fit holds, and writes a cluster file (docs/clusters.md)
with the measured matrix, which `place`, `emulate` and `compare` accept as
`--devices CLUSTER.json`.

--local times this process's devices; --workers the running cluster whose tasks
`/job:worker/task:0..` serve at the given addresses (each task's GPUs, or its CPUs
when it has none); --cluster the devices a cluster file lists, on its hosts'
addresses, after checking that the running cluster has every one of them.
"""

import os
import sys

from pardnn.base.errors import UserError
from pardnn.base.units import parse_size, parse_time

DEFAULT_SIZES = "4KiB,256KiB,4MiB,32MiB"
MAX_REPEATS = 1_000     # timed runs per chain: the median of a handful is the measure


def add_parser(sub):
    p = sub.add_parser("links", help="measure latency and bandwidth between devices; write a cluster file",
                       description="Time TF transfers between every device pair, fit latency + "
                                   "bytes/bandwidth, and write a cluster file.")
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--local", metavar="cpu:K|gpu", help="this process's devices")
    where.add_argument("--workers", metavar="HOST:PORT,...",
                       help="addresses of a running cluster's tasks /job:worker/task:0, 1, ...")
    where.add_argument("--cluster", metavar="FILE", help="a cluster file whose hosts' servers are running")
    p.add_argument("--sizes", default=DEFAULT_SIZES, metavar="S1,S2,...",
                   help=f"transfer sizes, at least two (default {DEFAULT_SIZES})")
    p.add_argument("--repeats", type=int, default=7, metavar="N", help="timed runs per chain (default 7)")
    p.add_argument("--hops", type=int, default=16, metavar="H",
                   help="extra transfers in the long chain, even (default 16)")
    p.add_argument("--timeout", default="10s", metavar="TIME",
                   help="how long to wait for a worker to answer (default 10s)")
    p.add_argument("--memory", metavar="SIZE",
                   help="memory per device (default: each GPU's; for CPUs this machine's RAM)")
    p.add_argument("--reserve", type=float, default=0.10, help="reserve written into the file (default 0.10)")
    p.add_argument("-o", "--out", required=True, metavar="CLUSTER.json", help="cluster file to write")
    p.set_defaults(run=run)


def run(args):
    sizes = parse_sizes(args.sizes)
    if not 1 <= args.repeats <= MAX_REPEATS:
        raise UserError(f"--repeats: need 1 to {MAX_REPEATS}, got {args.repeats}")
    if args.hops < 2 or args.hops % 2:
        raise UserError(f"--hops: need an even number of at least 2, got {args.hops}")
    if not 0.0 <= args.reserve < 1.0:
        raise UserError(f"--reserve: must be in [0, 1), got {args.reserve}")
    timeout_s = parse_time(args.timeout, "--timeout") / 1e6
    memory = None if args.memory is None else parse_size(args.memory, "--memory")
    if not args.out.endswith(".json"):
        raise UserError(f"-o: {args.out} must end in .json (so that --devices reads it as a cluster file)")
    if os.path.isdir(args.out):                       # checked before minutes of measuring
        raise UserError(f"-o: {args.out} is a folder")
    if not os.path.isdir(os.path.dirname(os.path.abspath(args.out))):
        raise UserError(f"-o: cannot write {args.out} (its folder does not exist)")
    from pardnn.hardware import cluster_file
    from pardnn.hardware.link_fit import fitted_cluster, format_links
    from pardnn.tf import link_bench as links

    target = _target(args, links, memory, timeout_s)
    if len(target.devices) < 2:
        raise UserError(f"found {len(target.devices)} device(s) ({', '.join(d.name for d in target.devices)}); "
                        f"timing links needs at least 2")
    print(f"timing {len(target.devices)} devices on {len(target.hosts)} host(s): "
          f"{', '.join(d.name for d in target.devices)}", file=sys.stderr)
    hop_us = links.measure(target, sizes, args.repeats, args.hops, log=lambda m: print(m, file=sys.stderr))
    cluster, err = fitted_cluster(target.devices, target.hosts, sizes, hop_us, args.reserve)
    print(format_links(cluster, err, sizes))
    try:
        cluster_file.save(cluster, args.out)
    except OSError as exc:
        raise UserError(f"-o: cannot write {args.out} ({exc.strerror})") from None
    print(f"wrote {args.out}")
    return 0


def parse_sizes(text) -> list:
    sizes = sorted({parse_size(x, "--sizes") for x in str(text).split(",") if x.strip()})
    if len(sizes) < 2 or sizes[0] < 4:
        raise UserError(f"--sizes: need at least two different sizes of 4 bytes or more, got {text!r}")
    return sizes


def _target(args, links, memory, timeout_s):
    if args.local is not None:
        return links.local_target(args.local, memory)
    if args.workers is not None:
        from pardnn.tf.distributed import hosts_of_addresses
        addresses = [a.strip() for a in args.workers.split(",") if a.strip()]
        return links.cluster_target(hosts_of_addresses(addresses), memory, timeout_s)
    from pardnn.hardware.cluster_file import load
    from pardnn.tf.distributed import open_session
    cluster = load(args.cluster, "--cluster")
    open_session(cluster, timeout_s=timeout_s, flag="--cluster").close()     # checks every device is there
    return links.Target(list(cluster.devices), list(cluster.hosts),
                        lambda graph: open_session(cluster, graph, timeout_s, "--cluster"))

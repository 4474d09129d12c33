"""`pardnn capacity PROFILE --devices PRESET[:K] [--memory SIZE] [--counts 1,2,4] [-o DIR]`:
how many devices the graph needs, and how much memory each (docs/capacity.md).

For each device count (1 to the cluster's K, or --counts), the least memory per
device at which the algorithm (default pardnn) fits, bisected with real placements
(pardnn.pipeline.capacity), with the step there and the least-memory bound; whether
it fits at the cluster's memory (the preset's, or --memory) and the step and speedup
over one device there; and the fewest devices that fit. Prints a table; with -o,
writes DIR/capacity.json, DIR/capacity.png and each count's placement in DIR/kN/
(the one at the cluster's memory when it fits there, else the one at the least
memory: `pardnn run DIR/kN` trains it), all or nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import time

import numpy as np

from pardnn.commands.common import (RECOMPUTE, add_cluster_args, add_memory_order_arg, cluster_from_args,
                                   cluster_inputs, refuse_below_least_memory)
from pardnn.commands.place import placed_inputs
from pardnn.base.errors import UserError
from pardnn.io.outputs import OutputDir, check_output_dir
from pardnn.base.jsonfile import write_json
from pardnn.hardware.hosts import accelerators, counted_devices
from pardnn.hardware.presets import HOST_SUFFIX
from pardnn.pipeline.capacity import check_devices, check_groups, count_rows, own_memory, replicas_at_memory
from pardnn.pipeline.report import samples_per_step
from pardnn.pipeline.load import load_cost_graph
from pardnn.pipeline.place_dir import write_placed_files
from pardnn.placers import registry as algorithms
from pardnn.base.progress import stage
from pardnn.base.units import format_size, format_time

FORMAT = "pardnn-capacity"
VERSION = 1


def add_parser(sub):
    p = sub.add_parser("capacity", help="how many devices a graph needs, and how much memory each",
                       description="For each device count, the least memory per device at which the graph "
                                   "fits, the step time there and at the cluster's memory, and the fewest "
                                   "devices that fit.")
    p.add_argument("profile", metavar="PROFILE", help="profile directory or cost graph .json")
    add_cluster_args(p)
    p.add_argument("--counts", metavar="K1,K2,...",
                   help="device counts to try (default: 1 to the cluster's device count)")
    p.add_argument("--algorithm", default="pardnn", metavar="NAME",
                   help=f"placement algorithm ({', '.join(algorithms.names())}); default pardnn")
    p.add_argument("-o", "--out", metavar="OUT_DIR",
                   help="write capacity.json, capacity.png and each count's placement (kN/) here")
    p.add_argument("--recompute", default="auto", choices=RECOMPUTE,
                   help="auto (default): recompute activations only at the devices' own memory, when nothing "
                        "fits there without it; on: also find the least memory with recomputation, below "
                        "the least without it; off: never")
    add_memory_order_arg(p, choices=("auto", "off"))
    p.set_defaults(run=run)


def parse_counts(text, k) -> list:
    """--counts as sorted distinct ints in 1..k; UserError naming the flag otherwise."""
    if text is None:
        return list(range(1, k + 1))
    try:
        counts = sorted({int(x) for x in str(text).split(",") if x.strip()})
    except ValueError:
        raise UserError(f"--counts: give device counts separated by commas, e.g. 1,2,4,8; got {text!r}") from None
    if not counts or counts[0] < 1 or counts[-1] > k:
        raise UserError(f"--counts: each count must be 1 to {k} (the devices of --devices, less a host tier); "
                        f"got {text!r}")
    return counts


def run(args):
    cluster = cluster_from_args(args)
    algorithms.candidates(args.algorithm)           # a bad name fails before any work
    counts = parse_counts(args.counts, accelerators(cluster))
    check_devices(cluster)
    if args.out is not None:
        check_output_dir(args.out, inputs=[args.profile, *cluster_inputs(args)])
    t0 = time.perf_counter()
    with stage(f"loading {args.profile}"):
        graph, info = load_cost_graph(args.profile)
    check_groups(graph, cluster, "--memory" if args.memory is not None else "--devices")
    if args.memory is not None:     # a placement on fewer devices is one on more: the largest count binds
        refuse_below_least_memory(graph, counted_devices(cluster, counts[-1]), args)
    with OutputDir(args.out) if args.out is not None else contextlib.nullcontext() as out:
        # each count's placed dir is written where and as soon as its row is found
        write = None if out is None else functools.partial(write_count, args, graph, info, out)
        found = count_rows(graph, cluster, counts, args.algorithm, write, recompute=args.recompute,
                           orders=args.memory_order != "off")
        rows = [row for row, _ in found]
        doc = document(args, graph, cluster, rows, time.perf_counter() - t0, samples_per_step(info.get("profile")))
        print_table(doc)
        if out is not None:
            with stage(f"writing {args.out}"):
                write_outputs(out, found, doc)
    if args.out is not None:
        print(f"  wrote {args.out}")
    return 0


def document(args, graph, cluster, rows, seconds, samples=None) -> dict:
    """capacity.json (docs/capacity.md); `samples`: one step's, when the profile says."""
    one = graph.total_work_us()
    fitting = [r.devices for r in rows if r.at_memory is not None]
    entries = []
    for row in rows:
        entry = row.fields(one)
        if samples and "step_us_at_memory" in entry:
            entry["time_per_sample_us_at_memory"] = entry["step_us_at_memory"] / samples
        replicated = replicas_at_memory(graph, cluster, row, samples)
        if replicated is not None:
            entry["replicas_at_memory"] = replicated
        entries.append(entry)
    return {"format": FORMAT, "version": VERSION, "profile": str(args.profile), "algorithm": args.algorithm,
            "devices": args.devices, "num_nodes": graph.num_nodes, "memory_bytes": own_memory(cluster),
            "reserve": cluster.reserve, "single_device_us": one,
            "fewest_devices": min(fitting) if fitting else None,
            "samples_per_step": samples, "rows": entries,
            "placements": sum(r.placements for r in rows), "memories_tried": sum(r.checks for r in rows),
            "seconds": seconds,
            "title": f"{args.profile} on {args.devices} ({args.algorithm})"}


def print_table(doc) -> None:
    mem = format_size(doc["memory_bytes"])
    print(f"{doc['algorithm']}: {doc['num_nodes']} nodes on {doc['devices']}, {mem} per device "
          f"(reserve {doc['reserve']:.0%}); one device: {format_time(doc['single_device_us'])} of ops")
    head = ["devices", "least memory", "bound", "x bound", "step there", f"fits {mem}", "step there", "speedup"]
    per_sample = bool(doc.get("samples_per_step"))
    lines = [head + ["per sample"] if per_sample else head]
    for r in doc["rows"]:
        fits = r["fits_at_memory"]
        lines.append([str(r["devices"]), format_size(r["least_memory_bytes"]),
                      format_size(r["least_memory_bound_bytes"]),
                      f"{r['least_memory_bytes'] / r['least_memory_bound_bytes']:.3f}" if r["least_memory_bound_bytes"]
                      else "-",
                      format_time(r["step_us_at_least_memory"]), "yes" if fits else "no",
                      format_time(r["step_us_at_memory"]) if fits else "-",
                      f"{r['speedup_at_memory']:.2f}x" if fits and r["speedup_at_memory"] else "-"]
                     + ([format_time(r["time_per_sample_us_at_memory"]) if fits else "-"] if per_sample else []))
    widths = [max(len(line[i]) for line in lines) for i in range(len(lines[0]))]
    for line in lines:
        print("  " + "  ".join(cell.rjust(w) for cell, w in zip(line, widths)))
    for r in doc["rows"]:
        rep = r.get("replicas_at_memory")
        if rep is not None:
            per = (f", {format_time(rep['time_per_sample_us'])} per sample ({rep['samples_per_step']} per step)"
                   if "time_per_sample_us" in rep else "")
            print(f"  {rep['count']} replicas of {r['devices']} device{'s' * (r['devices'] != 1)} "
                  f"(--replicas {rep['count']}, the profile's batch each): step {format_time(rep['step_time_us'])}"
                  f"{per}")
    for r in doc["rows"]:
        fetch = r.get("host_fetch_at_memory")
        if fetch is not None:
            print(f"  {r['devices']} device{'s' * (r['devices'] != 1)} and the host: {fetch['reads']} weights "
                  f"({format_size(fetch['bytes'])}) fetched from the host twice, for the forward and for the "
                  f"backward pass (when: capacity.json, `pardnn explain` on its placed dir)")
    for r in doc["rows"]:
        if "least_memory_recomputing_bytes" in r:
            least, bound = r["least_memory_recomputing_bytes"], r["least_memory_recomputing_bound_bytes"]
            print(f"  {r['devices']} device{'s' * (r['devices'] != 1)}, recomputing {r['recompute_at_least_memory']['ops']} ops: least memory "
                  f"{format_size(least)}, {least / max(bound, 1):.3f}x the bound {format_size(bound)} that holds "
                  f"whatever is recomputed; step there {format_time(r['step_us_at_least_memory_recomputing'])}")
    fewest = doc["fewest_devices"]
    print(f"  fewest devices that fit {mem} each: {fewest if fewest else 'none of these counts'}; "
          f"{doc['memories_tried']} memories tried, {doc['placements']} placements, {doc['seconds']:.1f} s")


def write_count(args, graph, info, out, row) -> list:
    """Count `row`'s placed dir kN/ in the OutputDir `out` (with inputs.json, for
    `pardnn explain`, when a --devices spec names the count's devices): the
    placement at the cluster's memory when it fits there, else the one at the least
    memory. The names written, for `out` to adopt (this may run in a lane's process)."""
    first = len(out.names)
    fit = row.at_memory or row.least
    prefix = f"k{row.devices}/"
    cluster = fit.placement.cluster
    write_placed_files(out, fit.graph or graph, info, fit.placement, cluster, args.algorithm, args.devices,
                       prefix=prefix, views=False)
    spec = count_spec(args, cluster, fit.memory)
    if spec is not None:
        write_json(placed_inputs(args, spec, str(fit.memory)), out.temp(prefix + "inputs.json"))
    write_json(fit.report.to_json(), out.temp(prefix + "report.json"))
    return out.names[first:]


def write_outputs(out, found, doc) -> None:
    """capacity.json and capacity.png in the OutputDir `out`, beside the placed dirs
    `write_count` wrote (`found`: (row, the names it wrote) per count)."""
    from pardnn.io.capacity_plot import plot_capacity
    for (row, names), entry in zip(found, doc["rows"]):
        fit = row.at_memory or row.least
        out.adopt(names)
        out.mark(f"k{row.devices}/")
        entry["placement"] = {"dir": f"k{row.devices}", "memory_bytes": fit.memory}
    write_json(doc, out.temp("capacity.json"))
    plot_capacity(doc, out.temp("capacity.png"))


def count_spec(args, cluster, memory):
    """A --devices spec that, with the command's other flags and --memory `memory`,
    makes `cluster` (the first devices of --devices'), or None: --devices with its
    count replaced (dgx-h100 -> dgx-h100:4, cpu:8 -> cpu:4, dgx-h100+host ->
    dgx-h100:4+host) when that gives the same devices, memory and links."""
    spec = str(args.devices)
    host = spec.endswith(HOST_SUFFIX)
    spec = spec[:-len(HOST_SUFFIX)] if host else spec
    base = spec.rsplit(":", 1)[0] if spec.rsplit(":", 1)[-1].isdigit() else spec
    devices = f"{base}:{accelerators(cluster)}{HOST_SUFFIX if host else ''}"
    again = argparse.Namespace(**{**vars(args), "devices": devices, "memory": str(memory)})
    try:
        named = cluster_from_args(again)
    except UserError:
        return None
    same = (named.names == cluster.names and np.array_equal(named.memory, cluster.memory)
            and named.reserve == cluster.reserve and np.array_equal(named.bandwidth, cluster.bandwidth)
            and np.array_equal(named.latency_us, cluster.latency_us))
    return again.devices if same else None

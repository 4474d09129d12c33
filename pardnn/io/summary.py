"""The short summary printed after a placement: makespan, speedup over one device,
per-device nodes and peak memory against capacity (and, for the devices the memory
repair had to fix, their peak before it), ParDNN's candidates and what refining
within memory gained, and time taken. Only the report
fields that were computed are shown."""

from pardnn.base.units import format_size, format_time


def print_summary(report, out_dir=None, file=None):
    lines = [f"{report['algorithm']}: {report['num_nodes']} nodes, {report['num_edges']} edges "
             f"on {len(report['devices'])} devices"]
    if "makespan_us" in report:
        line = f"  makespan {format_time(report['makespan_us'])}"
        if report.get("single_device_us"):
            line += f", speedup {report['single_device_us'] / report['makespan_us']:.2f}x over one device"
        if "lower_bound_us" in report:
            line += f", lower bound {format_time(report['lower_bound_us'])}"
            if report["lower_bound_us"] > 0:
                line += f" (gap {report['makespan_us'] / report['lower_bound_us']:.3f}x)"
        if report.get("time_per_sample_us"):
            line += f"; {format_time(report['time_per_sample_us'])} per sample ({report['samples_per_step']} per step)"
        lines.append(line)
    peaks = report.get("peak_memory_bytes")
    caps = report["memory_capacity_bytes"]
    for i, name in enumerate(report["devices"]):
        line = f"  {name}: {report['nodes_per_device'][i]} nodes"
        if peaks is not None:       # against what the placement may use: memory minus the reserve
            usable = int(caps[i] * (1.0 - report["reserve"]))
            line += f", peak {format_size(peaks[i])} of {format_size(usable)} usable"
        if name in report.get("repaired_devices", ()):
            line += f" (repaired: was {format_size(report['peak_memory_before_repair_bytes'][i])})"
        lines.append(line)
    if "feasible" in report:
        lines.append(f"  memory: {'fits' if report['feasible'] else 'DOES NOT FIT'} "
                     f"(reserve {report['reserve']:.0%})")
    if "least_memory" in report:
        least = report["least_memory"]
        host = f" beside the host's {format_size(least['host_bytes'])}" if "host_bytes" in least else ""
        lines.append(f"  least memory: {format_size(least['bytes'])} per device usable{host}, for any placement "
                     f"({least['binding']}: {least['what']})")
    if report.get("repaired_devices"):
        lines.append(f"  memory repair: {len(report['repaired_devices'])} device(s) overflowed; moved "
                     f"{report['moved_nodes']} nodes ({report['moved_nodes'] / report['num_nodes']:.1%})")
    if report.get("candidates"):
        lines.append("  candidates: " + _candidates(report))
    if report.get("refine_memory"):
        fit = report["refine_memory"]
        lines.append(f"  refined within memory: makespan {format_time(fit['makespan_after_repair_us'])} "
                     f"after the repair, {format_time(report['makespan_us'])} after "
                     f"{fit['batches']} kept batch(es) of moves; {report['changed_nodes']} nodes "
                     f"({report['changed_nodes'] / report['num_nodes']:.1%}) not where the placer put them")
    lines.append(f"  communication {format_size(report['comm_bytes'])} per step; "
                 f"placed in {report['placement_seconds']:.2f} s")
    if out_dir:
        lines.append(f"  wrote {out_dir}")
    print("\n".join(lines), file=file)


def _candidates(report) -> str:
    """`step1 12.3 ms, stages 10.1 ms (refined 9.8 ms, kept), etf infeasible, metis skipped`."""
    parts = []
    for name, c in report["candidates"].items():
        text = (f"{name} skipped" if "skipped" in c else f"{name} infeasible" if not c["feasible"]
                else f"{name} {format_time(c['makespan_us'])}")
        notes = ([f"refined {format_time(c['refined_makespan_us'])}"] if "refined_makespan_us" in c else []) + \
            (["kept"] if name == report.get("candidate") else [])
        parts.append(text + (f" ({', '.join(notes)})" if notes else ""))
    return ", ".join(parts)

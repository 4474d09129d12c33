"""An explanation (pardnn.explain.explain's dict) on the terminal, as rich tables:
the step, the memory at each device's peak, and what would help."""

from __future__ import annotations

import sys

from rich import box
from rich.console import Console
from rich.table import Table

from pardnn.explain.memory_at_peak import CATEGORIES
from pardnn.io.trace_events import short_names
from pardnn.pipeline.recompute import recompute_line
from pardnn.base.units import format_size, format_time

CATEGORY_TITLES = {"variables": "variables", "optimizer_state": "optimizer", "activations": "activations",
                   "gradients": "gradients", "other_tensors": "other", "scratch": "scratch"}
PATH_TITLES = {"compute_us": "compute", "transfer_us": "transfers", "device_wait_us": "waiting for a busy device"}


def print_explanation(explanation, top=5, file=None) -> None:
    """Print `explanation` (its lists cut to `top` rows) on `file` (stdout)."""
    file = file or sys.stdout
    console = Console(file=file, width=None if file.isatty() else 132, highlight=False)
    short = dict(zip(explanation["devices"], short_names(explanation["devices"])))
    for part in (_step(explanation, short, top), _memory(explanation, short, top), _what_if(explanation)):
        for item in part:
            console.print(item)
        console.print()


def _step(e, short, top):
    s = e["step"]
    span = s["makespan_us"]
    bounds = ", ".join(f"{name} {format_time(value)}" for name, value in _bound_names(s).items())
    path = s["path"]
    shares = ", ".join(f"{title} {format_time(path[key])} ({_share(path[key], span)})"
                       for key, title in PATH_TITLES.items())
    yield (f"[bold]The step[/bold]: {format_time(span)} with {e['algorithm']} on {len(e['devices'])} devices "
           f"({e['num_nodes']} nodes, {e['layers']['count']} layers by {e['layers']['by']}); "
           f"the bound that binds is the {s['binding']}, {format_time(s['lower_bound_us'])}: gap {s['gap']:.3f}x")
    yield f"  bounds: {bounds}"
    micro = e.get("micro_batches")
    if micro:
        tried = ", ".join(f"{name} {format_time(us)}" for name, us in micro["schedules"].items())
        yield (f"  micro-batches: {micro['micro_batches']}, in the order {micro['schedule']} (each order: {tried}); "
               f"the devices idle {micro['bubble']:.1%} of the step")
    if e.get("recompute"):
        yield recompute_line(e)
    if e.get("host_fetch"):
        yield from _fetches(e["host_fetch"], top)
    elif e.get("memory_order"):
        yield (f"  memory order: {e['memory_order']['name']}, {e['memory_order']['control_edges']} control edges "
               f"(order.csv) that lower the peak")
    yield f"  critical path ({path['ops']} ops, {path['transfers']} transfers): {shares}"
    table = _table("layer", "compute", "transfers", "busy device", "total", "share of step",
                   title=f"critical path by layer (top {top} of {len(s['path_by_layer'])})")
    for row in s["path_by_layer"][:top]:
        table.add_row(row["layer"], format_time(row["compute_us"]), format_time(row["transfer_us"]),
                      format_time(row["device_wait_us"]), format_time(row["total_us"]), f"{row['share']:.1%}")
    yield table
    if s["transfers"]:
        table = _table("tensor", "bytes", "link", "from layer", "to layer", "cost", "queued",
                       title="transfers that cost the critical path most", text=(0, 3, 4))
        for row in s["transfers"][:top]:
            table.add_row(row["tensor"], format_size(row["bytes"]),
                          f"{short[row['from_device']]} -> {short[row['to_device']]}", row["from_layer"],
                          row["to_layer"], format_time(row["cost_us"]), format_time(row["queued_us"]))
        yield table
    table = _table("device", "nodes", "busy", "idle, input on the wire", "idle, nothing to run",
                   title="where each device's step goes")
    for row in s["devices"]:
        table.add_row(short[row["device"]], str(row["nodes"]),
                      *(f"{format_time(row[key])} ({_share(row[key], span)})"
                        for key in ("busy_us", "idle_inputs_us", "idle_nothing_us")))
    yield table
    rows = e["layers"]["table"]
    table = _table("layer", "nodes", "compute", "where it computes", title=f"layers by compute (top {top} of "
                   f"{len(rows)})", text=(0, 3))
    for row in rows[:top]:
        busy = sum(row["busy_us"])
        where = sorted(range(len(row["busy_us"])), key=lambda d: (-row["busy_us"][d], d))
        table.add_row(row["layer"], str(sum(row["nodes"])), format_time(busy),
                      ", ".join(f"{short[e['devices'][d]]} {_share(row['busy_us'][d], busy)}"
                                for d in where[:4] if row["busy_us"][d] > 0))
    yield table


def _bound_names(s) -> dict:
    from pardnn.explain.step import BOUND_NAMES
    return {BOUND_NAMES[key]: value for key, value in s["bounds"].items()}


def _memory(e, short, top):
    yield "[bold]The memory[/bold] at each device's peak (movable: no pin holds it, nothing bigger is colocated with it)"
    table = _table("device", "peak", "of usable", "at", *CATEGORY_TITLES.values(), "movable",
                   title="what is resident or live at the peak")
    for row in e["memory"]:
        c = row["categories"]
        table.add_row(short[row["device"]], format_size(row["peak_bytes"]), _share(row["peak_bytes"], row["capacity_bytes"]),
                      format_time(row["peak_time_us"]), *(format_size(c[key]) for key in CATEGORIES),
                      format_size(sum(row["movable"].values())))
    yield table
    table = _table("device", "layer", *CATEGORY_TITLES.values(), "total", "movable",
                   title=f"the {top} layers holding most at each peak", text=(0, 1))
    for row in e["memory"]:
        for i, layer in enumerate(row["layers"][:top]):
            table.add_row(short[row["device"]] if i == 0 else "", layer["layer"],
                          *(format_size(layer[key]) if layer[key] else "" for key in CATEGORIES),
                          format_size(layer["total"]), format_size(layer["movable"]))
    yield table


def _what_if(e):
    yield "[bold]What would help[/bold] (each change emulated)"
    table = _table("change", "step", "vs now", "fits", "how", title=None, text=(0, 4))
    span = e["step"]["makespan_us"]
    for row in e["what_if"]:
        step = "—" if row["makespan_us"] is None else format_time(row["makespan_us"])
        change = "" if row["makespan_us"] is None else f"{(row['makespan_us'] - span) / span:+.1%}"
        fits = {True: "yes", False: "no", None: ""}[row["feasible"]]
        table.add_row(row["change"], step, change, fits, row["how"])
    yield table


def _fetches(fetch, top):
    """The host-fetch lines: what it reads again, then the largest weights fetched and
    when each of their two copies reaches the GPU (report.json's `host_fetch`)."""
    yield (f"  host fetch: {fetch['reads']} weights ({format_size(fetch.get('bytes', 0))}) read again for the "
           f"backward pass, the reads ordered by {fetch['control_edges']} control edges (order.csv)")
    rows = sorted(fetch.get("fetches", []), key=lambda r: (-r["bytes"], r["forward_us"]))[:top]
    if rows:
        table = _table("weight read", "bytes", "forward fetch at", "backward fetch at",
                       title=f"weights fetched from the host (largest {len(rows)} of {fetch['reads']})")
        for row in sorted(rows, key=lambda r: r["forward_us"]):
            table.add_row(row["weight"], format_size(row["bytes"]), format_time(row["forward_us"]),
                          format_time(row["backward_us"]))
        yield table


def _table(*columns, title=None, text=(0,)) -> Table:
    """A table whose columns at the indices `text` are left-aligned names that wrap,
    the others right-aligned numbers."""
    table = Table(*columns, title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    for i, column in enumerate(table.columns):
        if i in text:
            column.overflow = "fold"
        else:
            column.justify, column.no_wrap = "right", True
    return table


def _share(part, whole) -> str:
    return f"{part / whole:.0%}" if whole else "—"

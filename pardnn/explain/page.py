"""An explanation as one HTML page: the terminal's tables, and the timeline and memory
plots (pardnn.explain.plots) inside it as base64 PNGs, so it opens without a network
or any other file."""

from __future__ import annotations

import base64
import html

from pardnn.emulator.critical_path import critical_path
from pardnn.explain.memory_at_peak import CATEGORIES
from pardnn.explain.plots import memory_png, timeline_png
from pardnn.explain.step import BOUND_NAMES
from pardnn.io.trace_events import short_names
from pardnn.base.units import format_size, format_time

STYLE = ("body{font-family:sans-serif;margin:2em;max-width:80em}table{border-collapse:collapse;margin:.5em 0 1.5em}"
         "td,th{padding:.2em .7em;border-bottom:1px solid #ddd;text-align:right}td:first-child,th:first-child"
         "{text-align:left}img{max-width:100%}")


def write_page(explanation, placed, top, path) -> None:
    """Write `explanation` of `placed` to `path` as HTML, lists cut to `top` rows."""
    nodes, transfers = critical_path(placed.graph, placed.device, placed.schedule)
    body = [_step(explanation, top), _image(timeline_png(placed, nodes, transfers), "timeline"),
            _memory(explanation, top), _image(memory_png(explanation), "memory at each peak"),
            _what_if(explanation)]
    with open(path, "w", encoding="utf-8") as f:
        f.write(f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>pardnn explain</title>"
                f"<style>{STYLE}</style></head><body>{''.join(body)}</body></html>\n")


def _step(e, top) -> str:
    s = e["step"]
    span = s["makespan_us"]
    short = dict(zip(e["devices"], short_names(e["devices"])))
    bounds = ", ".join(f"{BOUND_NAMES[key]} {format_time(value)}" for key, value in s["bounds"].items())
    path = s["path"]
    parts = [f"<h1>The step: {format_time(span)}</h1>",
             _p(f"{e['algorithm']} on {len(e['devices'])} devices, {e['num_nodes']} nodes in "
                f"{e['layers']['count']} layers (by {e['layers']['by']}). The bound that binds is the "
                f"{s['binding']}, {format_time(s['lower_bound_us'])}: gap {s['gap']:.3f}x. Bounds: {bounds}."),
             _p(f"Critical path ({path['ops']} ops, {path['transfers']} transfers): compute "
                f"{format_time(path['compute_us'])}, transfers {format_time(path['transfer_us'])}, waiting for a "
                f"busy device {format_time(path['device_wait_us'])}."),
             _table(["layer", "compute", "transfers", "busy device", "total", "share of step"],
                    [[r["layer"], format_time(r["compute_us"]), format_time(r["transfer_us"]),
                      format_time(r["device_wait_us"]), format_time(r["total_us"]), f"{r['share']:.1%}"]
                     for r in s["path_by_layer"][:top]])]
    if s["transfers"]:
        parts += ["<h2>Transfers that cost the critical path most</h2>", _table(
            ["tensor", "bytes", "link", "from layer", "to layer", "cost", "queued"],
            [[r["tensor"], format_size(r["bytes"]), f"{short[r['from_device']]} -> {short[r['to_device']]}",
              r["from_layer"], r["to_layer"], format_time(r["cost_us"]), format_time(r["queued_us"])]
             for r in s["transfers"][:top]])]
    parts += ["<h2>Where each device's step goes</h2>", _table(
        ["device", "nodes", "busy", "idle, input on the wire", "idle, nothing to run"],
        [[short[r["device"]], r["nodes"], format_time(r["busy_us"]), format_time(r["idle_inputs_us"]),
          format_time(r["idle_nothing_us"])] for r in s["devices"]])]
    return "".join(parts)


def _memory(e, top) -> str:
    short = dict(zip(e["devices"], short_names(e["devices"])))
    titles = [key.replace("_", " ") for key in CATEGORIES]
    rows = [[short[r["device"]], format_size(r["peak_bytes"]), format_size(r["capacity_bytes"]),
             format_time(r["peak_time_us"]), *(format_size(r["categories"][key]) for key in CATEGORIES),
             format_size(sum(r["movable"].values()))] for r in e["memory"]]
    layers = [[short[r["device"]] if i == 0 else "", layer["layer"],
               *(format_size(layer[key]) if layer[key] else "" for key in CATEGORIES),
               format_size(layer["total"]), format_size(layer["movable"])]
              for r in e["memory"] for i, layer in enumerate(r["layers"][:top])]
    return "".join([
        "<h1>The memory at each device's peak</h1>",
        _p("Movable: no pin holds it on its device and nothing bigger is colocated with it."),
        _table(["device", "peak", "usable", "at", *titles, "movable"], rows),
        f"<h2>The {top} layers holding most at each peak</h2>",
        _table(["device", "layer", *titles, "total", "movable"], layers)])


def _what_if(e) -> str:
    span = e["step"]["makespan_us"]
    rows = [[r["change"], "—" if r["makespan_us"] is None else format_time(r["makespan_us"]),
             "" if r["makespan_us"] is None else f"{(r['makespan_us'] - span) / span:+.1%}",
             {True: "yes", False: "no", None: ""}[r["feasible"]], r["how"]] for r in e["what_if"]]
    return "<h1>What would help (each change emulated)</h1>" + _table(["change", "step", "vs now", "fits", "how"], rows)


def _table(header, rows) -> str:
    head = "".join(f"<th>{html.escape(str(h))}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _p(text) -> str:
    return f"<p>{html.escape(text)}</p>"


def _image(png, alt) -> str:
    return f"<img alt='{html.escape(alt)}' src='data:image/png;base64,{base64.b64encode(png).decode('ascii')}'>"

"""The two pictures of an explanation, as PNG bytes (matplotlib's object API on an Agg
canvas, no pyplot): the timeline of the step with its critical path, and each device's
memory at its peak stacked by category."""

from __future__ import annotations

import io

import numpy as np

from pardnn.explain.memory_at_peak import CATEGORIES
from pardnn.io.trace_events import short_names

COLORS = {"variables": "#1f77b4", "optimizer_state": "#9467bd", "activations": "#2ca02c",
          "gradients": "#ff7f0e", "other_tensors": "#8c8c8c", "scratch": "#d62728"}


def timeline_png(placed, nodes, transfers) -> bytes:
    """Each device's busy time (grey), the critical path's ops (red) and its transfers
    (blue arrows from the producer's finish to the arrival)."""
    from matplotlib.figure import Figure

    graph, schedule, device = placed.graph, placed.schedule, placed.device
    k = placed.cluster.num_devices
    end = max(schedule.makespan, 1e-9)
    scale, unit = (1e3, "ms") if end >= 1e3 else (1.0, "us")
    fig = Figure(figsize=(11, 1.0 + 0.45 * k))
    ax = fig.add_subplot()
    for d in range(k):
        mine = np.flatnonzero(device == d)
        lo, hi = _merged(schedule.start[mine], schedule.finish[mine])
        ax.broken_barh(list(zip(lo / scale, (hi - lo) / scale)), (d - 0.35, 0.7), facecolors="#bbbbbb")
    on_path = nodes[schedule.finish[nodes] > schedule.start[nodes]]
    for d in range(k):
        mine = on_path[device[on_path] == d]
        ax.broken_barh(list(zip(schedule.start[mine] / scale, (schedule.finish[mine] - schedule.start[mine]) / scale)),
                       (d - 0.35, 0.7), facecolors="#d62728")
    src = graph.edge_src[schedule.transfer_edge[transfers]]
    for u, x in zip(src.tolist(), transfers.tolist()):
        ax.annotate("", xy=(schedule.transfer_arrival[x] / scale, schedule.transfer_dst[x]),
                    xytext=(schedule.finish[u] / scale, device[u]),
                    arrowprops={"arrowstyle": "->", "color": "#1f77b4", "linewidth": 0.8})
    ax.set_yticks(range(k), short_names(placed.cluster.names), fontsize=8)
    ax.set_ylim(k - 0.5, -0.5)
    ax.set_xlim(0, end / scale)
    ax.set_xlabel(f"time ({unit})")
    ax.set_title("emulated step: busy (grey), critical path ops (red) and transfers (blue)", fontsize=10)
    return _png(fig)


def _merged(start, finish):
    """A device's op runs (disjoint), back-to-back ones joined: fewer rectangles to draw."""
    order = np.argsort(start, kind="stable")
    start, finish = start[order], finish[order]
    keep = finish > start
    start, finish = start[keep], finish[keep]
    if len(start) == 0:
        return start, finish
    new = np.ones(len(start), bool)
    new[1:] = start[1:] > np.maximum.accumulate(finish)[:-1]
    firsts = np.flatnonzero(new)
    return start[firsts], np.maximum.reduceat(finish, firsts)


def memory_png(explanation) -> bytes:
    """Per device, its peak stacked by category, with its usable capacity marked."""
    from matplotlib.figure import Figure

    rows = explanation["memory"]
    names = short_names([row["device"] for row in rows])
    largest = max([row["peak_bytes"] for row in rows] + [1])
    scale, unit = next(((s, u) for s, u in ((2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB")) if largest >= s),
                       (1, "B"))
    fig = Figure(figsize=(11, 1.2 + 0.4 * len(rows)))
    ax = fig.add_subplot()
    left = np.zeros(len(rows))
    for key in CATEGORIES:
        width = np.array([row["categories"][key] for row in rows], float) / scale
        ax.barh(range(len(rows)), width, left=left, color=COLORS[key], label=key.replace("_", " "))
        left += width
    capacity = np.array([row["capacity_bytes"] for row in rows], float) / scale
    if capacity.max() <= 2 * left.max():
        ax.scatter(capacity, range(len(rows)), marker="|", s=300, color="black", label="usable capacity")
    ax.set_yticks(range(len(rows)), names, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel(unit)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))     # beside the bars
    ax.set_title("memory at each device's peak", fontsize=10)
    return _png(fig)


def _png(fig) -> bytes:
    out = io.BytesIO()
    fig.savefig(out, format="png", dpi=90, bbox_inches="tight")
    return out.getvalue()

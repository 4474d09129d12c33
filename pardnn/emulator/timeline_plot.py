"""The picture of an emulated step: per device, memory in use over time against the
device's capacity, and a strip showing when the device computes (dark) or idles.

Drawn with matplotlib's object API on an Agg canvas (no pyplot, no global backend
change). Long memory timelines are reduced to their maximum per pixel column so peaks
stay visible; the busy strip shades each column by the fraction of it the device
computes, so a 200k-node graph plots in a second or two and short idle gaps still show
as grey rather than vanishing.
"""

import numpy as np

from pardnn.io.trace_events import max_per_bin
from pardnn.base.units import format_size

_BINS = 2000          # horizontal resolution of the reduced memory curves


def plot_timeline(schedule, profile, cluster, device, path, title=""):
    """Write the timeline of `schedule`/`profile` (placement `device`) to `path` (PNG)."""
    from matplotlib.figure import Figure

    k = cluster.num_devices
    end = max(schedule.makespan, 1e-9)
    tscale, tunit = (1e3, "ms") if end >= 1e3 else (1.0, "us")
    shown = [max(int(p), 1) for p in profile.peak_bytes]
    mscale, munit = _memory_unit(max(shown))
    height = 1.2 + min(1.4, 22.0 / k) * k
    fig = Figure(figsize=(11, height))
    grid = fig.add_gridspec(2 * k, 1, height_ratios=[4, 1] * k, hspace=0.15, left=0.08,
                            right=0.98, top=1 - 0.55 / height, bottom=0.5 / height)
    axes = []
    for d in range(k):
        mem = fig.add_subplot(grid[2 * d], sharex=axes[0] if axes else None)
        strip = fig.add_subplot(grid[2 * d + 1], sharex=mem)
        axes += [mem, strip]
        _memory_panel(mem, profile, cluster, d, end, tscale, mscale, munit)
        _busy_strip(strip, schedule, np.flatnonzero(device == d), end, tscale)
        mem.tick_params(labelbottom=False)
        strip.tick_params(labelbottom=d == k - 1)
    axes[-1].set_xlabel(f"time ({tunit})")
    axes[0].set_xlim(0, end / tscale)
    fig.suptitle(title or f"emulated step: {end / tscale:.3f} {tunit} on {k} devices")
    fig.savefig(path, format="png", dpi=90)


def _memory_unit(largest):
    for scale, unit in ((2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB")):
        if largest >= scale:
            return scale, unit
    return 1, "B"


def _memory_panel(ax, profile, cluster, d, end, tscale, mscale, munit):
    times, levels = max_per_bin(*profile.timeline(d), end, _BINS)
    x = np.append(times, end) / tscale
    y = np.append(levels, levels[-1]) / mscale
    ax.fill_between(x, y, step="post", color="tab:blue", alpha=0.35, linewidth=0)
    ax.step(x, y, where="post", color="tab:blue", linewidth=0.8)
    peak, cap = profile.peak_bytes[d], int(cluster.capacity[d])
    top = max(peak, 1) * 1.25 / mscale
    if cap / mscale <= top * 1.6:
        ax.axhline(cap / mscale, color="tab:red", linestyle="--", linewidth=1)
        top = max(top, cap * 1.1 / mscale)
    ax.set_ylim(0, top)
    ax.plot([profile.peak_time_us[d] / tscale], [peak / mscale], "o", color="tab:red", markersize=3)
    name = cluster.names[d].rsplit("device:", 1)[-1]
    status = "OVER" if peak > cap else "fits"
    ax.set_ylabel(f"{name}\n{munit}", fontsize=8)
    ax.text(0.995, 0.92, f"peak {format_size(peak)} of {format_size(cap)} capacity ({status})",
            transform=ax.transAxes, ha="right", va="top", fontsize=7,
            color="tab:red" if peak > cap else "black")
    ax.tick_params(labelsize=7)


def _busy_strip(ax, schedule, nodes, end, tscale):
    """Fraction of each horizontal bin the device computes, black = busy, white = idle."""
    start, finish = schedule.start[nodes], schedule.finish[nodes]
    order = np.argsort(start, kind="stable")
    start, dur = start[order], (finish - start)[order]
    edges = np.linspace(0.0, end, _BINS + 1)
    # busy time before each edge; a device runs one node at a time, so intervals are disjoint
    j = np.searchsorted(start, edges, side="right")
    prefix = np.concatenate([[0.0], np.cumsum(dur)])
    last = np.maximum(j - 1, 0)
    partial = np.clip(edges - start[last], 0, dur[last]) if len(start) else np.zeros_like(edges)
    before = np.where(j > 0, prefix[last] + partial, 0.0)
    fraction = np.diff(before) / (end / _BINS)
    ax.imshow(fraction[None, :], aspect="auto", cmap="Greys", vmin=0, vmax=1,
              extent=(0, end / tscale, 0, 1), interpolation="nearest")
    ax.set_yticks([])
    ax.set_ylabel(f"busy\n{prefix[-1] / end:.0%}", fontsize=7, rotation=0, ha="right", va="center")
    ax.tick_params(labelsize=7)

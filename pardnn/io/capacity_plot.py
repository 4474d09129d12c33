"""The picture of `pardnn capacity`: against the device count, the step time (at the
least memory that fits, and at the cluster's own memory) on the left axis and the
least memory per device (pardnn's, and the bound below which none fits) on the right,
with the cluster's memory as a line. matplotlib's object API on an Agg canvas, as
pardnn.emulator.timeline_plot."""

from pardnn.base.units import format_size


def plot_capacity(doc, path) -> None:
    """Write capacity.json's document `doc` (pardnn.commands.capacity) to `path` (PNG)."""
    from matplotlib.figure import Figure

    rows = doc["rows"]
    k = [r["devices"] for r in rows]
    fig = Figure(figsize=(8, 4.5))
    ax = fig.add_subplot(1, 1, 1)
    ax.plot(k, [r["step_us_at_least_memory"] / 1e3 for r in rows], "o-", color="tab:blue",
            label="step at the least memory")
    at = [(r["devices"], r["step_us_at_memory"] / 1e3) for r in rows if r["fits_at_memory"]]
    if at:
        ax.plot(*zip(*at), "s--", color="tab:cyan", label=f"step at {format_size(doc['memory_bytes'])}")
    ax.set_xlabel("devices")
    ax.set_ylabel("emulated step (ms)", color="tab:blue")
    ax.set_xticks(k)
    ax.set_ylim(bottom=0)
    mem = ax.twinx()
    top = max([doc["memory_bytes"]] + [r["least_memory_bytes"] for r in rows])
    unit, name = next((u, n) for u, n in ((2**40, "TiB"), (2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB"), (1, "B"))
                      if top >= u or u == 1)
    mem.plot(k, [r["least_memory_bytes"] / unit for r in rows], "o-", color="tab:red", label="least memory (pardnn)")
    mem.plot(k, [r["least_memory_bound_bytes"] / unit for r in rows], "v:", color="tab:orange",
             label="least memory (bound: none fits below)")
    mem.axhline(doc["memory_bytes"] / unit, color="grey", linewidth=0.8, label="memory per device")
    mem.set_ylabel(f"memory per device ({name})", color="tab:red")
    mem.set_ylim(bottom=0)
    lines = ax.get_legend_handles_labels()
    more = mem.get_legend_handles_labels()
    ax.legend(lines[0] + more[0], lines[1] + more[1], fontsize=8, loc="upper center")
    fig.suptitle(doc.get("title", "pardnn capacity"), fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)

"""The capacity search as a picture: each SLO'd figure of every probe against concurrency, the SLO
line, the capacity and the lowest miss marked (what people look at to trust a capacity number)."""

from __future__ import annotations

from pathlib import Path

from ..contract import figures


def _conc_line(ax, conc, colour: str, label: str) -> None:
    if conc is not None:
        ax.axvline(conc, ls="--", lw=1, color=colour, label=f"{label} c{conc}")


def capacity_plot(doc: dict, path: Path) -> Path:
    """``path`` (PNG) for one capacity.json document; one panel per SLO figure."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    slos = sorted(doc["slo"])
    fig, axes = plt.subplots(len(slos), 1, figsize=(7, 3.2 * len(slos)), squeeze=False)
    for ax, key in zip(axes[:, 0], slos, strict=True):
        probes = [(p["concurrency"], v) for p in doc["probes"] for v in p["verdicts"] if v["slo"] == key]
        for met, colour, label in ((True, "tab:green", "meets"), (False, "tab:red", "misses")):
            pts = [(c, v["value"]) for c, v in probes if v["met"] == met and v["value"] is not None]
            if pts:
                xs, ys = [c for c, _ in pts], [v for _, v in pts]
                ax.scatter(xs, ys, color=colour, zorder=3, label=f"probe {label} the SLO")
        ordered = sorted((c, v["value"]) for c, v in probes if v["value"] is not None)
        if ordered:
            ax.plot([c for c, _ in ordered], [v for _, v in ordered], color="grey", lw=0.8, zorder=2)
        ax.axhline(doc["slo"][key], color="black", ls=":", lw=1.2, label=f"SLO {key} ≤ {doc['slo'][key]:g}")
        _conc_line(ax, doc["capacity"], "tab:green", "capacity")
        _conc_line(ax, doc["lowest_miss"], "tab:red", "lowest miss")
        ax.set_xscale("log", base=2)
        ticks = sorted({p["concurrency"] for p in doc["probes"]})
        ax.set_xticks(ticks, [str(t) for t in ticks])
        ax.minorticks_off()
        ax.set_xlabel("concurrency")
        ax.set_ylabel(figures.label(figures.SLO_FIGURES[key].name) if key in figures.SLO_FIGURES else key)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    axes[0, 0].set_title(f"{doc['recipe']}: capacity at SLO ({doc['outcome']})")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path

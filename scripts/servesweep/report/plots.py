"""The summary's plots: throughput vs interactivity with its Pareto frontier, TTFT p95 vs load."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from ..contract import figures

THROUGHPUT = "rank_tps"  # the field's headline: total tok/s per GPU (the stack's where its GPUs are virtual)


def _throughput_label(df: pd.DataFrame) -> str:
    return figures.label("total_tps") if df["virtual_gpus"].any() else figures.label("total_tps_per_gpu")


def drawn(df: pd.DataFrame) -> pd.DataFrame:
    """The points drawn as measured: a marked point (run/trust) is not; the summary lists it."""
    return df[df["marks"] == ""]


def pareto(df: pd.DataFrame, throughput: str = THROUGHPUT) -> pd.DataFrame:
    """Points not beaten on both ``throughput`` (total tok/s per GPU) and output tok/s per user (marked
    ones are not points)."""
    pts = drawn(df).dropna(subset=[throughput, "output_tps_per_user"])
    pts = pts.sort_values("output_tps_per_user", ascending=False)
    front, best = [], -1.0
    for idx, value in pts[throughput].items():
        if value > best:
            front.append(idx)
            best = value
    return pts.loc[front].sort_values("output_tps_per_user")


def _finish(plt, fig, ax, labels: tuple[str, str], title: str, path: Path) -> str:
    ax.set_xlabel(labels[0])
    ax.set_ylabel(labels[1])
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path.name


MAX_PLOTTED_RECIPES = 10


def plots(df: pd.DataFrame, plot_dir: Path, slos: dict) -> dict[str, list[str]]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plot_dir.mkdir(parents=True, exist_ok=True)
    made: dict[str, list[str]] = {}
    tps_label = _throughput_label(df)
    for scen, sdf in drawn(df).groupby("scenario"):
        files, title = [], scen
        best = sdf.groupby("recipe")[THROUGHPUT].max().sort_values(ascending=False)
        if len(best) > MAX_PLOTTED_RECIPES:  # a readable plot: the best setups, said so in the title
            sdf = sdf[sdf["recipe"].isin(best.index[:MAX_PLOTTED_RECIPES])]
            title = f"{scen} (top {MAX_PLOTTED_RECIPES} of {len(best)} recipes by {tps_label})"
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for recipe, rdf in sdf.groupby("recipe"):
            rdf = rdf.sort_values("concurrency")
            ax.plot(rdf["output_tps_per_user"], rdf[THROUGHPUT], "o-", label=recipe, alpha=0.8)
            for r in rdf.itertuples():
                ax.annotate(
                    f"c{r.concurrency}",
                    (r.output_tps_per_user, getattr(r, THROUGHPUT)),
                    fontsize=7,
                    textcoords="offset points",
                    xytext=(3, 3),
                )
        front = pareto(sdf)
        if len(front):
            ax.plot(front["output_tps_per_user"], front[THROUGHPUT], "k--", lw=1.2, label="Pareto frontier")
        labels = (f"interactivity: {figures.label('output_tps_per_user')}", f"throughput: {tps_label}")
        files.append(
            _finish(
                plt,
                fig,
                ax,
                labels,
                f"{title}: throughput vs interactivity",
                plot_dir / f"{scen}-throughput-vs-interactivity.png",
            )
        )

        files.append(_ttft_plot(plt, sdf, slos, title, plot_dir / f"{scen}-ttft-p95.png"))
        made[scen] = files
    return made


def _ttft_plot(plt, sdf: pd.DataFrame, slos: dict, title: str, path: Path) -> str:
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for recipe, rdf in sdf.groupby("recipe"):
        rdf = rdf.sort_values("concurrency")
        ax.plot(rdf["concurrency"], rdf["ttft_p95_s"], "o-", label=recipe)
        limit = slos.get(recipe, {}).get("ttft_p95_s")
        if limit:
            ax.axhline(limit, ls=":", lw=1, color=ax.lines[-1].get_color(), label=f"{recipe} SLO {limit:g} s")
    labels = ("concurrency", figures.label("ttft_p95_s"))
    return _finish(plt, fig, ax, labels, f"{title}: TTFT p95 vs concurrency", path)

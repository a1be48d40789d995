"""The tuning answer of each swept recipe (render/sweep): its variants ranked by capacity per GPU,
each axis's effect, a Pareto plot across variants, and a best variant named only when it is ahead
beyond the noise (else the tied ones)."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
from tabulate import tabulate

from ..contract import paths
from .fmt import num

TABLE = {"tablefmt": "github", "disable_numparse": True}
# Without repeats a throughput delta inside this share of the lower value is noise (one point's
# run-to-run spread measured on these machines: 1-3 %); the summary's baseline table uses the same.
NOISE_BAND = 0.03


@dataclass(frozen=True)
class Standing:
    """One variant's tuning figures: the highest concurrency it holds its SLO at (``searched``: its
    capacity search's answer, good to ``tolerance``; else the highest listed concurrency that met)."""

    name: str
    choice: dict
    gpus: int | None
    capacity: int | None
    tolerance: int
    searched: bool
    tps: float | None  # total tok/s per GPU at that concurrency
    tps_hw: float | None  # its confidence half-width where measured with repeats
    status: str  # "measured", or why there is no figure

    @property
    def per_gpu(self) -> float | None:
        return None if self.capacity is None or not self.gpus else self.capacity / self.gpus

    @property
    def measured(self) -> bool:
        return self.status == "measured"


def ahead(a: Standing, b: Standing) -> bool:
    """Whether ``a`` beats ``b`` beyond the noise: on capacity per GPU beyond the search's tolerance
    (a listed concurrency is exact), else on throughput beyond the repeats' intervals or the band."""
    if not a.measured or a.per_gpu is None:
        return False
    if not b.measured or b.per_gpu is None:
        return True
    if a.per_gpu != b.per_gpu:
        return a.per_gpu > (b.capacity + b.tolerance) / b.gpus
    if a.tps is None or b.tps is None:
        return False
    if a.tps_hw is not None and b.tps_hw is not None:
        return a.tps - b.tps > a.tps_hw + b.tps_hw
    return a.tps - b.tps > NOISE_BAND * min(a.tps, b.tps)


def ranking(standings: list[Standing]) -> tuple[list[Standing], list[Standing]]:
    """(every variant best first, the leaders: one when it is ahead of every other, else the tied)."""
    order = sorted(standings, key=lambda s: (s.measured, s.per_gpu or 0.0, s.tps or 0.0), reverse=True)
    if not order or not order[0].measured or order[0].per_gpu is None:
        return order, []
    top = order[0]
    return order, [top] + [s for s in order[1:] if s.measured and s.per_gpu is not None and not ahead(top, s)]


def standing(name: str, choice: dict, rows: pd.DataFrame, cap: dict | None, why_not: str) -> Standing:
    """A variant's standing from its points (rows of the summary's frame) and capacity document."""
    if rows.empty and cap is None:
        return Standing(name, choice, None, None, 0, False, None, None, why_not)
    ranked = rows[rows["rankable"]] if "rankable" in rows else rows
    gpus = int(rows["gpus"].iloc[0]) if len(rows) else None
    if cap is not None:
        at = cap.get("at_capacity") or {}
        gpus = gpus or _cap_gpus(cap)
        tol = cap["bounds"]["tolerance"]
        return Standing(name, choice, gpus, cap["capacity"], tol, True, at.get("total_tps_per_gpu"), None, "measured")
    if ranked.empty:
        return Standing(name, choice, gpus, None, 0, False, None, None, "no point fit to rank (see its rows)")
    met = ranked[ranked["slo_met"].map(lambda v: v is True or v is None or (isinstance(v, float) and math.isnan(v)))]
    if met.empty:
        return Standing(name, choice, gpus, None, 0, False, None, None, "measured")
    best = met.sort_values("concurrency").iloc[-1]
    hw = best.get("total_tps_per_gpu_hw")
    hw = None if hw is None or pd.isna(hw) else float(hw)
    return Standing(name, choice, gpus, int(best["concurrency"]), 0, False, best["total_tps_per_gpu"], hw, "measured")


def _cap_gpus(cap: dict) -> int | None:
    probes = cap.get("probes") or []
    return probes[0].get("gpus") if probes else None


def _capacity_cell(s: Standing) -> str:
    if not s.measured:
        return "–"
    if s.capacity is None:
        return "none meets the SLO"
    return f"c{s.capacity}" + (
        f" (±{s.tolerance})" if s.searched and s.tolerance else "" if s.searched else " (listed)"
    )


def variant_table(order: list[Standing], axes: list[str]) -> str:
    rows = []
    for i, s in enumerate(order, 1):
        rank = str(i) if s.measured and s.per_gpu is not None else "–"
        rows.append(
            [rank, s.name.rsplit(".", 1)[-1], *(s.choice.get(a, "") for a in axes), num(s.gpus), _capacity_cell(s),
             num(s.per_gpu, 2), num(s.tps), s.status]
        )  # fmt: skip
    headers = ["rank", "variant", *axes, "GPUs", "capacity at SLO", "capacity per GPU", "total tok/s/GPU there", ""]
    return tabulate(rows, headers, **TABLE)


def axis_effects(order: list[Standing], axes: list[str], labels: dict[str, list[str]]) -> str:
    """Per axis and value: how many variants ran with it, and their best and median capacity per GPU."""
    rows = []
    for a in axes:
        for lb in labels[a]:
            got = [s.per_gpu or 0.0 for s in order if s.choice.get(a) == lb and s.measured]  # none met: 0
            best = max(got) if got else None
            med = statistics.median(got) if got else None
            rows.append([a, lb, str(len(got)), num(best, 2), num(med, 2)])
    return tabulate(rows, ["axis", "value", "variants measured", "best capacity/GPU", "median capacity/GPU"], **TABLE)


def verdict_line(leaders: list[Standing], order: list[Standing]) -> str:
    if not leaders:
        return "**No variant has a capacity at its SLO yet.**"
    unmeasured = sum(not s.measured for s in order)
    if len(leaders) == 1 and unmeasured:
        return (
            f"**Best of the {len(order) - unmeasured} measured: `{leaders[0].name}`**, ahead of each beyond the noise; "
            f"{unmeasured} not measured in full (see why below), so not compared."
        )
    if len(leaders) == 1:
        return f"**Best: `{leaders[0].name}`**, ahead of every other variant beyond the noise."
    names = ", ".join(f"`{s.name}`" for s in leaders)
    return (
        f"**Tied: {names}**: none is ahead of the others beyond the noise (capacity within the search's "
        f"tolerance, throughput within the repeats' intervals or {NOISE_BAND:.0%})."
    )


def former_variants(recipe: str, variants: dict, root: Path) -> list[str]:
    """Result folders of this sweep's earlier variants: kept on disk, not selected."""
    found = sorted(p.name for p in (root / paths.RESULTS).glob(f"{recipe}.*") if p.is_dir())
    return [n for n in found if n not in variants and n.removesuffix(f".{paths.SCREEN}") not in variants]


def tuning_section(df: pd.DataFrame, sweeps: dict, caps: list[dict], plot_dir: Path, root: Path) -> list[str]:
    """One part per swept recipe: the ranked variants, the verdict, each axis's effect, the plot."""
    parts = []
    by_cap = {d["recipe"]: d for d in caps}
    for recipe, info in sorted(sweeps.items()):
        axes = list(info["axes"])
        not_run = info.get("not_run") or {}
        standings = [
            standing(n, choice, df[df["recipe"] == n] if len(df) else df, by_cap.get(n), not_run.get(n, "not run yet"))
            for n, choice in info["variants"].items()
        ]
        order, leaders = ranking(standings)
        said = "; ".join(f"{a} = `{info['axes'][a]['field']}` ({', '.join(info['axes'][a]['labels'])})" for a in axes)
        parts += ["", f"## Tuning `{recipe}`", "", f"{len(order)} variants, strategy {info['strategy']}: {said}."]
        if info["excluded"]:
            parts.append(f"Excluded by the recipe: {', '.join(info['excluded'])}.")
        parts += ["", verdict_line(leaders, order), "", variant_table(order, axes), "", "### Effect of each axis", ""]
        parts.append(axis_effects(order, axes, {a: info["axes"][a]["labels"] for a in axes}))
        former = former_variants(recipe, info["variants"], root)
        if former:
            parts += ["", f"Results of earlier variants kept on disk, not selected: {', '.join(former)}."]
        made = tuning_plot(df[df["recipe"].isin(info["variants"])] if len(df) else df, recipe, plot_dir)
        if made:
            parts += ["", f"![tuning of {recipe}](plots/{made})"]
    return parts


def tuning_plot(df: pd.DataFrame, recipe: str, plot_dir: Path) -> str | None:
    """Output tok/s per user against total tok/s per GPU, every rankable point labelled by variant."""
    cols = ["output_tps_per_user", "total_tps_per_gpu"]
    if df.empty or not set(cols) <= set(df.columns):
        return None
    pts = df.dropna(subset=cols)
    if "rankable" in pts:
        pts = pts[pts["rankable"]]
    if pts.empty:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from .plots import pareto

    fig, ax = plt.subplots(figsize=(7.5, 5))
    for name, vdf in pts.groupby("recipe"):
        short = name.rsplit(".", 1)[-1]
        ax.plot(vdf[cols[0]], vdf[cols[1]], "o", alpha=0.8, label=short)
        for r in vdf.itertuples():
            ax.annotate(f"{short} c{r.concurrency}", (getattr(r, cols[0]), getattr(r, cols[1])), fontsize=6,
                        textcoords="offset points", xytext=(3, 3))  # fmt: skip
    front = pareto(pts)
    ax.plot(front[cols[0]], front[cols[1]], "k--", lw=1, label="Pareto frontier")
    ax.set_xlabel("output tok/s per user")
    ax.set_ylabel("total tok/s per GPU")
    ax.set_title(f"tuning {recipe}: variants")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=6)
    fig.tight_layout()
    name = f"tuning-{recipe}.png"
    plot_dir.mkdir(parents=True, exist_ok=True)
    fig.savefig(plot_dir / name, dpi=110)
    plt.close(fig)
    return name

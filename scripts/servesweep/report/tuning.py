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
from ..contract.figures import NOISE_BAND
from .fmt import num
from .plots import pareto
from .ranking import Candidate, noise

TABLE = {"tablefmt": "github", "disable_numparse": True}


@dataclass(frozen=True)
class Basis:
    """What capacity and throughput are divided by: GPUs, or on a cluster of virtual GPUs the stack
    (a per-GPU figure there would be a label, not a measurement)."""

    per: str  # "GPU" or "stack"
    tps: str  # the summary column ranked on at equal capacity

    @classmethod
    def of(cls, df: pd.DataFrame) -> Basis:
        virtual = "virtual_gpus" in df and bool(df["virtual_gpus"].any())
        return cls("stack", "total_tps") if virtual else cls("GPU", "total_tps_per_gpu")


GPU_BASIS = Basis("GPU", "total_tps_per_gpu")


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
    settings: str | None = None  # the client settings it was measured with (None: unknown, compared with any)

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
    if None not in (a.settings, b.settings) and a.settings != b.settings:
        return False  # measured with other client settings: not compared (report/ranking)
    if a.per_gpu != b.per_gpu:
        return a.per_gpu > (b.capacity + b.tolerance) / b.gpus
    if a.tps is None or b.tps is None:
        return False
    ca, cb = Candidate(a.name, a.tps, a.tps_hw), Candidate(b.name, b.tps, b.tps_hw)
    return a.tps - b.tps > noise(ca, cb)  # the one tie rule's noise


def ranking(standings: list[Standing]) -> tuple[list[Standing], list[Standing]]:
    """(every variant best first, the leaders: one when it is ahead of every other, else the tied)."""
    order = sorted(standings, key=lambda s: (s.measured, s.per_gpu or 0.0, s.tps or 0.0), reverse=True)
    if not order or not order[0].measured or order[0].per_gpu is None:
        return order, []
    top = order[0]
    return order, [top] + [s for s in order[1:] if s.measured and s.per_gpu is not None and not ahead(top, s)]


def standing(
    name: str, choice: dict, rows: pd.DataFrame, cap: dict | None, why_not: str, basis: Basis = GPU_BASIS
) -> Standing:
    """A variant's standing from its points (rows of the summary's frame) and capacity document."""
    if rows.empty and cap is None:
        return Standing(name, choice, None, None, 0, False, None, None, why_not)
    ranked = rows[(rows["marks"] == "") & (rows["logs_note"] == "")] if "marks" in rows else rows  # trusted only
    gpus = int(rows["gpus"].iloc[0]) if len(rows) else _cap_gpus(cap)
    gpus = 1 if basis.per == "stack" else gpus
    if cap is not None:
        at = cap.get("at_capacity") or {}
        tps = at.get("total_tps_per_gpu") if basis.per == "GPU" else None
        return Standing(name, choice, gpus, cap["capacity"], cap["bounds"]["tolerance"], True, tps, None, "measured")
    if ranked.empty:
        return Standing(name, choice, gpus, None, 0, False, None, None, f"not ranked: {_why_unranked(rows)}")
    met = ranked[ranked["slo_met"].map(lambda v: v is True or v is None or (isinstance(v, float) and math.isnan(v)))]
    if met.empty:
        return Standing(name, choice, gpus, None, 0, False, None, None, "measured")
    best = met.sort_values("concurrency").iloc[-1]
    hw = best.get(f"{basis.tps}_hw")
    hw = None if hw is None or pd.isna(hw) else float(hw)
    settings = best.get("client_settings")
    settings = settings if isinstance(settings, str) else None
    tps = best.get(basis.tps)
    tps = None if tps is None or pd.isna(tps) else float(tps)
    return Standing(name, choice, gpus, int(best["concurrency"]), 0, False, tps, hw, "measured", settings)


def _why_unranked(rows: pd.DataFrame) -> str:
    """The marks (run/trust) or log findings that keep a variant's points out of the ranking."""
    why = [f"c{r.concurrency} {r.mark_kinds or r.logs_note}" for r in rows.itertuples() if r.marks or r.logs_note]
    return "; ".join(why) or "no trusted point"


def _cap_gpus(cap: dict) -> int | None:
    probes = cap.get("probes") or []
    return probes[0].get("gpus") if probes else None


def _capacity_cell(s: Standing) -> str:
    if not s.measured:
        return "–"
    if s.capacity is None:
        return "none meets the SLO"
    if not s.searched:
        return f"≥ c{s.capacity} (highest listed that met)"
    return f"c{s.capacity}" + (f" (±{s.tolerance})" if s.tolerance else "")


def variant_table(order: list[Standing], axes: list[str], basis: Basis = GPU_BASIS) -> str:
    rows = []
    for i, s in enumerate(order, 1):
        rank = str(i) if s.measured and s.per_gpu is not None else "–"
        gpus = num(s.gpus) if basis.per == "GPU" else "virtual"
        rows.append(
            [rank, s.name.rsplit(".", 1)[-1], *(s.choice.get(a, "") for a in axes), gpus, _capacity_cell(s),
             num(s.per_gpu, 2), num(s.tps), s.status]
        )  # fmt: skip
    tps = "total tok/s/GPU there" if basis.per == "GPU" else "total tok/s there (GPUs virtual)"
    headers = ["rank", "variant", *axes, "GPUs", "capacity at SLO", f"capacity per {basis.per}", tps, "status"]
    return tabulate(rows, headers, **TABLE)


def axis_effects(order: list[Standing], axes: list[str], labels: dict[str, list[str]], per: str = "GPU") -> str:
    """Per axis and value: how many variants ran with it, and their best and median capacity per GPU."""
    rows = []
    for a in axes:
        for lb in labels[a]:
            got = [s.per_gpu or 0.0 for s in order if s.choice.get(a) == lb and s.measured]  # none met: 0
            best = max(got) if got else None
            med = statistics.median(got) if got else None
            rows.append([a, lb, str(len(got)), num(best, 2), num(med, 2)])
    return tabulate(
        rows, ["axis", "value", "variants ranked", f"best capacity/{per}", f"median capacity/{per}"], **TABLE
    )


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
    among = f" among the {len(order) - unmeasured} measured" if unmeasured else ""
    rest = f"; {unmeasured} not measured in full (see why below), so not compared" if unmeasured else ""
    return (
        f"**Tied{among}: {names}**: none is ahead of the others beyond the noise (capacity within the search's "
        f"tolerance, throughput within the repeats' intervals or {NOISE_BAND:.0%}; other client settings are not "
        f"compared{rest})."
    )


def former_variants(recipe: str, variants: dict, root: Path) -> list[str]:
    """Result folders of this sweep's earlier variants: kept on disk, not selected."""
    found = sorted(p.name for p in (root / paths.RESULTS).glob(f"{recipe}.*") if p.is_dir())
    return [n for n in found if n not in variants and n.removesuffix(f".{paths.SCREEN}") not in variants]


def tuning_section(df: pd.DataFrame, sweeps: dict, caps: list[dict], plot_dir: Path, root: Path) -> list[str]:
    """One part per swept recipe: the ranked variants, the verdict, each axis's effect, the plot."""
    by_cap, basis = {d["recipe"]: d for d in caps}, Basis.of(df)
    return [
        line
        for recipe, info in sorted(sweeps.items())
        for line in _sweep_part(df, recipe, info, by_cap, basis, (plot_dir, root))
    ]


def _sweep_part(df: pd.DataFrame, recipe: str, info: dict, by_cap: dict, basis: Basis, dirs: tuple) -> list[str]:
    plot_dir, root = dirs
    axes, not_run = info.get("axis_order") or list(info["axes"]), info.get("not_run") or {}
    standings = [
        standing(n, c, df[df["recipe"] == n] if len(df) else df, by_cap.get(n), not_run.get(n, "not run yet"), basis)
        for n, c in info["variants"].items()
    ]
    order, leaders = ranking(standings)
    said = "; ".join(f"{a} = `{info['axes'][a]['field']}` ({', '.join(info['axes'][a]['labels'])})" for a in axes)
    parts = ["", f"## Tuning `{recipe}`", "", f"{len(order)} variants, strategy {info['strategy']}: {said}."]
    if info["excluded"]:
        parts.append(f"Excluded by the recipe: {', '.join(info['excluded'])}.")
    parts += [
        "",
        verdict_line(leaders, order),
        "",
        variant_table(order, axes, basis),
        "",
        "### Effect of each axis",
        "",
    ]
    parts.append(axis_effects(order, axes, {a: info["axes"][a]["labels"] for a in axes}, basis.per))
    former = former_variants(recipe, info["variants"], root)
    if former:
        parts += ["", f"Results of earlier variants kept on disk, not selected: {', '.join(former)}."]
    made = tuning_plot(df[df["recipe"].isin(info["variants"])] if len(df) else df, recipe, plot_dir, basis)
    drawn = (
        f"![tuning of {recipe}](plots/{made})" if made else "_Pareto plot: no trusted point to draw (see the marks)._"
    )
    return parts + ["", drawn]


def _missed(met) -> bool:
    """A verdict of the summary's frame: False (missed), True, or None/NaN (no SLO)."""
    return met is not None and met == met and not bool(met)


def tuning_plot(df: pd.DataFrame, recipe: str, plot_dir: Path, basis: Basis = GPU_BASIS) -> str | None:
    """Output tok/s per user against total tok/s per GPU (per stack where GPUs are virtual), every
    trusted point labelled by its variant and concurrency; a point that misses its SLO is hollow."""
    cols = ["output_tps_per_user", basis.tps]
    if df.empty or not set(cols) <= set(df.columns):
        return None
    pts = df.dropna(subset=cols)
    if "marks" in pts:
        pts = pts[pts["marks"] == ""]  # a marked point is never drawn as measured
    if pts.empty:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 5))
    missed = pts["slo_met"].apply(_missed) if "slo_met" in pts else pd.Series(False, index=pts.index)
    for name, vdf in pts.groupby("recipe"):
        short, miss = name.rsplit(".", 1)[-1], missed[vdf.index]
        color = ax.plot([], [])[0].get_color()  # the variant's colour, for its met and missed points alike
        ax.plot(vdf[~miss][cols[0]], vdf[~miss][cols[1]], "o", color=color, alpha=0.8, label=short)
        ax.plot(vdf[miss][cols[0]], vdf[miss][cols[1]], "o", color=color, mfc="none")
        for r, m in zip(vdf.itertuples(), miss, strict=True):
            ax.annotate(f"{short} c{r.concurrency}" + (" (SLO missed)" if m else ""), (getattr(r, cols[0]),
                        getattr(r, cols[1])), fontsize=6, textcoords="offset points", xytext=(3, 3))  # fmt: skip
    if missed.any():
        ax.plot([], [], "o", color="grey", mfc="none", label="hollow: misses its SLO")
    front = pareto(pts, basis.tps)  # the summary's frontier, on this table's basis
    ax.plot(front[cols[0]], front[cols[1]], "k--", lw=1, label="Pareto frontier")
    ax.set_xlabel("output tok/s per user")
    ax.set_ylabel("total tok/s per GPU" if basis.per == "GPU" else "total tok/s per stack (GPUs virtual)")
    ax.set_title(f"tuning {recipe}: variants")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=6)
    fig.tight_layout()
    name = f"tuning-{recipe}.png"
    plot_dir.mkdir(parents=True, exist_ok=True)
    fig.savefig(plot_dir / name, dpi=110)
    plt.close(fig)
    return name

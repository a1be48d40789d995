"""The summary's best-setup table: per scenario and concurrency, the leader by the one tie rule
(report/ranking) among points that met their SLO, whose logs are clean, that carry no mark, whose
stack's accuracy holds, measured with the same client settings."""

from __future__ import annotations

import math

import pandas as pd
from tabulate import tabulate

from ..contract import figures
from .fmt import num
from .ranking import Candidate, leader

RANKED = "rank_tps"  # total tok/s per GPU; on a cluster of virtual GPUs, the stack's total tok/s


def _met(v) -> bool:
    return v is None or v is True or (isinstance(v, float) and math.isnan(v))


def _why_not(row, blocked: dict) -> tuple[str, ...]:
    out = []
    missed = [m for m in str(row.slo_missed or "").split("; ") if m and not m.endswith("not measured")]
    if not _met(row.slo_met) and missed:  # an unmeasured figure is the mark's to explain, not a miss
        out.append("missed its SLO")
    if row.logs_note:
        out.append("logs not clean")
    if row.marks:
        out.append(row.mark_kinds)
    if row.recipe in blocked:
        out.append(blocked[row.recipe])
    return tuple(out)


def _candidate(row, blocked: dict) -> Candidate:
    value = getattr(row, RANKED)
    hw = row.total_tps_per_gpu_hw if not row.virtual_gpus else None
    settings = row.client_settings if isinstance(row.client_settings, str) else None  # None: unknown
    return Candidate(row.recipe, None if pd.isna(value) else float(value), hw, settings,
                     _why_not(row, blocked))  # fmt: skip


def best_per_concurrency(df: pd.DataFrame, blocked: dict | None = None) -> pd.DataFrame:
    """One row per scenario and concurrency: the leader's, or the top of a tie (``best`` says which:
    'fast' or 'tied: fast, dense'); ``not_compared`` names points of other client settings. ``blocked``:
    recipe -> why its accuracy forbids naming it best."""
    blocked = blocked or {}
    rows = []
    for _, group in df.groupby(["scenario", "concurrency"], sort=True):
        candidates = [_candidate(r, blocked) for r in group.itertuples()]
        ranking = leader(candidates)
        top = ranking.leader or (ranking.tied[0] if ranking.tied else None)
        row = group[group["recipe"] == top.name].iloc[0].copy() if top else group.iloc[0].copy()
        row["best"] = ranking.label if top else "none ranked"
        row["not_ranked"] = "; ".join(f"{c.name}: {', '.join(c.marks)}" for c in candidates if c.marks)
        other = sorted({c.name for c in ranking.not_compared if not c.marks and c.value is not None})
        row["not_compared"] = ", ".join(other)
        rows.append(row)
    return pd.DataFrame(rows)


def best_section(df: pd.DataFrame, blocked: dict | None = None) -> list[str]:
    best = best_per_concurrency(df, blocked)
    virtual = bool(df["virtual_gpus"].any())
    what = "total tok/s of the stack: its GPUs are virtual" if virtual else "total tok/s per GPU"
    parts = ["", f"## Best setup per concurrency ({what}, SLO met)", ""]
    if best.empty:
        return parts + ["_No point._"]
    rows = [
        [r.scenario, r.concurrency, r.best, num(getattr(r, RANKED)) if r.best != "none ranked" else "–",
         num(r.output_tps_per_gpu) if r.best != "none ranked" else "–", r.not_compared or "–", r.not_ranked or "–"]
        for r in best.itertuples()
    ]  # fmt: skip
    ranked = figures.label("total_tps") if virtual else figures.label("total_tps_per_gpu")
    headers = ["scenario", "conc", "best recipe", ranked, figures.label("output_tps_per_gpu"),
               "not compared (other client settings)", "not ranked (why)"]  # fmt: skip
    note = (f"A leader must be ahead beyond the noise (repeats' intervals, else {figures.NOISE_BAND:.0%}); "
            "otherwise the row says tied and names the tied recipes.")  # fmt: skip
    return parts + [tabulate(rows, headers, tablefmt="github", disable_numparse=True), "", note]

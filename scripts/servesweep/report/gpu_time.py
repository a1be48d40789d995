"""GPU time per stack: what the sweep spent (startup once, benchmarks, idle gaps between points,
the linger after the last point)
and what one engine start per recipe or per point would have cost (startups and benchmarks: their
idle gaps are not known). A stack serves the points of
every recipe with the same server identity, so a recipe is not the unit here: the stack is."""

from __future__ import annotations

import pandas as pd
from tabulate import tabulate

from .fmt import num

HEADERS = [
    "stack", "recipes", "points", "GPUs", "GPU-h startup", "GPU-h benchmark", "GPU-h idle between points",
    "GPU-h linger", "GPU-h spent", "GPU-h with one start per recipe", "GPU-h with one start per point",
]  # fmt: skip
UNRESET = "‡"  # the stack served several scenarios and a later point ran on caches an earlier one warmed
UNRESET_NOTE = (
    f"{UNRESET} cross-scenario reuse without a prefix-cache reset: later points ran on caches that points of "
    "another scenario warmed (enable `stack.reset_prefix_cache` where the engine has one)."
)


def idle_between_points_s(sdf: pd.DataFrame) -> float:
    """Seconds the stack was up with no point running: the gaps between one point's end and the
    next one's start (Snakemake re-evaluating, a point's own setup)."""
    spans = sorted(zip(pd.to_datetime(sdf["start_time"]), pd.to_datetime(sdf["end_time"]), strict=True))
    gaps = [(nxt[0] - cur[1]).total_seconds() for cur, nxt in zip(spans, spans[1:], strict=False)]
    return sum(g for g in gaps if g > 0)


def stack_rows(df: pd.DataFrame) -> list[list]:
    rows = []
    for stack, sdf in df.groupby("stack_id", sort=False):
        gpus, startup = sdf["gpus"].iloc[0], sdf["startup_s"].iloc[0]
        bench, idle = sdf["bench_s"].fillna(0).sum(), idle_between_points_s(sdf)
        # the keeper stops once idle for the linger after the stack's last point (earlier lingers,
        # joined by a follow-up run, are idle between points)
        linger = float(sdf.sort_values("stack_position")["linger_s"].fillna(0).iloc[-1])
        recipes = sorted(set(sdf["recipe"]))

        def h(seconds, gpus=gpus):
            return num(gpus * seconds / 3600, 3)

        mark = f" {UNRESET}" if unreset_reuse(sdf) else ""
        rows.append([
            f"{stack}{mark}", ", ".join(recipes), len(sdf), gpus, h(startup), h(bench), h(idle), h(linger),
            h(startup + bench + idle + linger), h(startup * len(recipes) + bench), h(sdf["startup_s"].sum() + bench),
        ])  # fmt: skip
    return rows


def unreset_reuse(sdf: pd.DataFrame) -> bool:
    """Several scenarios on one stack, and a point after the first ran without a prefix-cache reset."""
    later = sdf[sdf["stack_position"] > 1]
    return sdf["scenario"].nunique() > 1 and any(v is not True for v in later["caches_reset"])


def gpu_time_section(df: pd.DataFrame) -> list[str]:
    rows = stack_rows(df)
    out = ["", "## GPU time per stack", "", tabulate(rows, HEADERS, tablefmt="github", disable_numparse=True)]
    if any(UNRESET in r[0] for r in rows):
        out += ["", UNRESET_NOTE]
    return out

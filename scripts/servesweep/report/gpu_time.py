"""GPU time per stack: what the sweep spent (startup once, benchmarks, idle gaps between points,
the linger after the last point)
and what one engine start per recipe or per point would have cost (startups and benchmarks: their
idle gaps are not known). A stack serves the points of
every recipe with the same server identity, so a recipe is not the unit here: the stack is."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from tabulate import tabulate

from ..contract.figures import gpu_hours
from ..fileio.files import read_json_object
from .energy import kwh_lines
from .fmt import num

HEADERS = [
    "stack", "recipes", "points", "GPUs", "GPU-h startup", "GPU-h benchmark", "GPU-h idle between points",
    "GPU-h linger", "checks", "GPU-h checks", "GPU-h spent", "GPU-h with one start per recipe",
    "GPU-h with one start per point",
]  # fmt: skip
UNRESET = "‡"  # the stack served several scenarios and a later point ran on caches an earlier one warmed
UNRESET_NOTE = (
    f"{UNRESET} cross-scenario reuse without a prefix-cache reset: later points ran on caches that points of "
    "another scenario warmed (enable `stack.reset_prefix_cache` where the engine has one)."
)


def _seconds(times: pd.Series) -> np.ndarray:
    """ISO 8601 times (results write UTC) as epoch seconds, parsed once for the whole table; NaN
    where unreadable."""
    parsed = pd.to_datetime(times, utc=True, format="ISO8601", errors="coerce")
    return (parsed - pd.Timestamp(0, tz="UTC")).dt.total_seconds().to_numpy()


def idle_between_points_s(start: np.ndarray, end: np.ndarray) -> float:
    """Seconds the stack was up with no point running: the gaps between one point's end and the
    next one's start (Snakemake re-evaluating, a point's own setup)."""
    order = np.lexsort((end, start))  # by start, then end; unreadable times last
    gaps = start[order][1:] - end[order][:-1]
    return float(gaps[gaps > 0].sum())


def _stacks(df: pd.DataFrame):
    """Per stack: (id, recipes, points, GPUs, startup, benchmark, idle, linger, all startups, whether it
    served several scenarios without a cache reset, its first point's start); columns taken out of the
    frame once (10 000 points, 1 250 stacks: per-group pandas calls cost seconds)."""
    col = {k: df[k].to_numpy() for k in ("gpus", "recipe", "scenario")}
    col |= {k: df[k].astype(float).to_numpy() for k in ("startup_s", "bench_s", "linger_s", "stack_position")}
    col["reset"] = np.array(df["caches_reset"].tolist(), dtype=object)  # Python bools, for `is not True`
    start, end = _seconds(df["start_time"]), _seconds(df["end_time"])
    groups = df.groupby("stack_id", sort=False).indices
    for stack in (s for s in pd.unique(df["stack_id"]) if s in groups):
        i = groups[stack]
        bench, idle = np.nansum(col["bench_s"][i]), idle_between_points_s(start[i], end[i])
        # the keeper stops once idle for the linger after the stack's last point (earlier lingers,
        # joined by a follow-up run, are idle between points)
        last = i[np.argsort(col["stack_position"][i], kind="stable")[-1]]
        linger = float(np.nan_to_num(col["linger_s"][last]))
        later = col["reset"][i][col["stack_position"][i] > 1]
        unreset = len(set(col["scenario"][i])) > 1 and any(v is not True for v in later)
        yield (stack, sorted(set(col["recipe"][i])), len(i), col["gpus"][i[0]], col["startup_s"][i[0]], bench, idle,
               linger, np.nansum(col["startup_s"][i]), unreset, np.nanmin(start[i]))  # fmt: skip


def stack_rows(df: pd.DataFrame, checks: dict | None = None) -> list[list]:
    """One row per stack: every point it served (selected points and capacity probes alike) and the
    checks it ran (``checks``: stack id -> seconds of each eval; they run after its points)."""
    rows = []
    for stack, recipes, n, gpus, startup, bench, idle, linger, all_startups, unreset, _ in _stacks(df):
        checked = (checks or {}).get(stack, [])

        def h(seconds, gpus=gpus):
            return num(gpu_hours(gpus, seconds), 3)

        mark = f" {UNRESET}" if unreset else ""
        rows.append([
            f"{stack}{mark}", ", ".join(recipes), n, gpus, h(startup), h(bench), h(idle), h(linger), len(checked),
            h(sum(checked)), h(startup + bench + idle + linger + sum(checked)), h(startup * len(recipes) + bench),
            h(all_startups + bench),
        ])  # fmt: skip
    return rows


def spent_since(df: pd.DataFrame, since: float) -> tuple[float, int]:
    """(GPU-hours, stacks) of the stacks whose first point started at or after ``since`` (epoch s)."""
    spent = [
        gpu_hours(gpus, startup + bench + idle + linger)
        for _, _, _, gpus, startup, bench, idle, linger, _, _, first in _stacks(df)
        if first >= since
    ]
    return float(sum(spent)), len(spent)


def read_bill(path: Path) -> dict | None:
    """The bill file read back: None unless it is one (time, total GPU-h)."""
    doc = read_json_object(path)
    ok = isinstance(doc.get("time"), str) and isinstance(doc.get("gpu_h"), (int, float)) and doc["gpu_h"] >= 0
    try:
        pd.Timestamp(doc["time"]) if ok else None
    except ValueError:
        ok = False
    return doc if ok else None


def bill_section(df: pd.DataFrame, bill: dict | None) -> list[str]:
    """The last Slurm run's bill (workflow/bill, written as its jobs started) against what the stacks it
    started spent, by the same accounting (startup, points, idle, linger)."""
    if not bill or not len(df):
        return []
    since = pd.Timestamp(bill["time"]).timestamp()
    spent, stacks = spent_since(df, since)
    ratio = f" ({spent / bill['gpu_h']:.0%} of the bill)" if bill["gpu_h"] else ""
    bound = bill.get("gpu_h_bound")
    bound = f", bound {bound:.3f}" if isinstance(bound, (int, float)) and not isinstance(bound, bool) else ""
    return ["", "## Bill against spend", "",
            f"The run that started at {bill['time']} was billed {bill['gpu_h']:.3f} GPU-h (expected: startup and "
            f"points as last measured, else at their jobs' bounds{bound}); the {stacks} stack(s) it started spent "
            f"{spent:.3f} GPU-h{ratio}."]  # fmt: skip


def gpu_time_section(df: pd.DataFrame, checks: dict | None = None) -> list[str]:
    rows = stack_rows(df, checks)
    out = ["", "## GPU time per stack", "", tabulate(rows, HEADERS, tablefmt="github", disable_numparse=True)]
    if any(UNRESET in r[0] for r in rows):
        out += ["", UNRESET_NOTE]
    return out + kwh_lines(df)  # energy's hook: kWh per stack (report/energy)

"""The bill a Slurm run shows before it submits anything (the dry run included): per stack (one
server configuration: every recipe with the same servers) of the points this run will execute, the
GPU-hours its allocations will hold and how many allocations it requests.

GPU-hours = GPUs x (startup per allocation + each point's time + the capacity searches' worst case
of further probes + the declared evals + the linger). The startup is the last one measured for the recipe's stack when a
result records it, else the job's bound (readiness timeout + margin); a point's time is the time
its job asks for (warm-up, run, grace), an upper bound of what it spends."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

from ..contract.paths import result_file
from .selection import CHECK_S


@dataclass(frozen=True)
class StackBill:
    recipes: tuple[str, ...]
    points: int
    gpus: int
    allocations: int
    startup_s: float
    startup_measured: bool
    points_s: float
    probes_s: float
    linger_s: float
    checks_s: float = 0.0  # the recipes' declared evals, at their jobs' bound each

    @property
    def gpu_h(self) -> float:
        held_s = self.allocations * self.startup_s + self.points_s + self.probes_s + self.checks_s + self.linger_s
        return self.gpus * held_s / 3600


def measured_startup_s(root: Path, recipes: tuple[str, ...], concs: dict) -> float | None:
    """The startup the latest result of these recipes records for its stack (None: none measured)."""
    latest = None
    for r in recipes:
        for c in concs[r]:
            try:
                doc = json.loads((root / result_file(r, c)).read_text())
                when, startup = doc["end_time"], float(doc["identity"]["stack"]["startup_s"])
            except (OSError, ValueError, KeyError, TypeError):
                continue
            if latest is None or when > latest[0]:
                latest = (when, startup)
    return None if latest is None else latest[1]


def stack_bills(sel) -> list[StackBill]:
    """One bill per stack with points to run (the selection's stale points, as its jobs are sized)."""
    bills, seen = [], set()
    for r in sel.selected:
        mates = sel.stacks.mates(r.name)
        if mates in seen:
            continue
        seen.add(mates)
        reuse = sel.reuse(r.name)
        points = sel.stacks.stale_points(r.name) if reuse else [(r.name, c) for c in sel.run.curve_points(r.name)]
        if not points:
            continue
        res = sel.index.facts(*points[0]).resources
        measured = measured_startup_s(sel.root, mates, {m: sel.recipes[m].concurrency for m in mates})
        probes = sel.stacks.points_s(r.name, []) if reuse else 0.0
        bills.append(
            StackBill(
                recipes=mates,
                points=len(points),
                gpus=res["nodes"] * res["gpus_per_node"],
                allocations=1 if reuse else len(points),
                startup_s=measured if measured is not None else res["startup_s"],
                startup_measured=measured is not None,
                points_s=sum(sel.index.facts(m, c).resources["point_s"] for m, c in points),
                probes_s=probes,
                linger_s=sel.stacks.linger_s(r.name) if reuse else 0.0,
                checks_s=CHECK_S * sum(len(sel.recipes[m].evals) for m in mates),
            )
        )
    return bills


def bill_lines(bills: list[StackBill]) -> list[str]:
    if not bills:
        return []
    formula = "GPUs x (startup per allocation + points + probes' worst case + evals + linger)"
    out = [f"bill of this run (GPU-hours = {formula}):"]
    for b in bills:
        startup = f"{b.startup_s:.0f} s {'measured' if b.startup_measured else 'bound'}"
        out.append(
            f"  {', '.join(b.recipes)}: {b.points} point(s), {b.allocations} allocation(s) of {b.gpus} GPU(s), "
            f"startup {startup}, points {b.points_s:.0f} s, probes ≤ {b.probes_s:.0f} s, evals ≤ {b.checks_s:.0f} s, "
            f"linger {b.linger_s:.0f} s"
            f" = {b.gpu_h:.2f} GPU-h"
        )
    total_h, allocations = sum(b.gpu_h for b in bills), sum(b.allocations for b in bills)
    out.append(f"  total: {allocations} allocation(s), {total_h:.2f} GPU-h (point times are their jobs' upper bounds)")
    return out


def bill_doc(bills: list[StackBill], when: str) -> dict:
    """What the summary compares with the spend: the bill as the run started (``when``, UTC ISO)."""
    stacks = [{"recipes": list(b.recipes), "allocations": b.allocations, "gpu_h": round(b.gpu_h, 4)} for b in bills]
    return {"time": when, "stacks": stacks, "gpu_h": round(sum(b.gpu_h for b in bills), 4)}


def say_bill(sel) -> None:
    """On stderr, before anything is submitted; nothing for a local run (no allocations)."""
    if not sel.submits_jobs:
        return
    for line in bill_lines(stack_bills(sel)):
        print(f"servesweep: {line}", file=sys.stderr)

"""The bill a Slurm run shows before it submits anything (the dry run included): per stack (one
server configuration: every recipe with the same servers) of the points this run will execute, the
GPU-hours its allocations will hold and how many allocations it requests.

GPU-hours = GPUs x (startup per allocation + each point's time + the capacity searches' worst case
of further probes + the declared evals + the linger), the accounting of the summary's "GPU time per
stack" (startup, benchmarks, idle between points, linger). Two figures: the *expected* one takes the
startup and each point's time (its benchmark and its share of the idle between points) from the
recipes' latest results where there are any, and the job's bounds elsewhere; the *bound* takes every
point at the time its job asks for (warm-up, run, grace) and the startup at its bound until one is
measured. Probes and evals count at their bounds in both. A halving sweep's variants waiting for their
screens count in full in the bound (all tied) and at the share its decision keeps in the expected one;
a search's trials still to choose count as its costliest variants in the bound and as an average one
in the expected figure."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from ..contract.figures import gpu_hours
from ..contract.paths import result_file
from ..fileio.errors import InputError, Problem
from .halving import keep_count
from .search import settings
from .selection import CHECK_S


@dataclass(frozen=True)
class StackBill:
    recipes: tuple[str, ...]
    points: int
    gpus: int
    allocations: int
    startup_s: float
    startup_measured: bool
    points_s: float  # the points at their jobs' bound
    probes_s: float
    linger_s: float
    checks_s: float = 0.0  # the recipes' declared evals, at their jobs' bound each
    expected_points_s: float | None = None  # measured where measured, else bound (None: as points_s)
    points_measured: int = 0

    def _hours(self, points_s: float) -> float:
        held_s = self.allocations * self.startup_s + points_s + self.probes_s + self.checks_s + self.linger_s
        return gpu_hours(self.gpus, held_s)

    @property
    def gpu_h(self) -> float:
        """The expected GPU-hours."""
        return self._hours(self.points_s if self.expected_points_s is None else self.expected_points_s)

    @property
    def gpu_h_bound(self) -> float:
        return self._hours(self.points_s)


@dataclass(frozen=True)
class Measured:
    """What the latest results of a stack's recipes say: its last startup, each point's benchmark
    time, and the idle time per point on the latest stack that ran them."""

    startup_s: float | None
    bench_s: dict  # (recipe, conc) -> seconds
    idle_per_point_s: float


def _times(root: Path, recipe: str, conc: int) -> tuple | None:
    try:
        doc = json.loads((root / result_file(recipe, conc)).read_text())
        i = doc["identity"]
        start, end = datetime.fromisoformat(i["start_time"]), datetime.fromisoformat(i["end_time"])
        return (
            i["stack"]["id"],
            start.timestamp(),
            end.timestamp(),
            float(i["stack"]["startup_s"]),
            float(doc["timings_s"]["bench"]),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


def measured(root: Path, points: list[tuple[str, int]]) -> Measured:
    """The measurements of ``points`` (recipe, conc) found in their results; unreadable ones are skipped."""
    seen = {p: t for p in points if (t := _times(root, *p)) is not None}
    if not seen:
        return Measured(None, {}, 0.0)
    latest = max(seen.values(), key=lambda t: t[2])
    on_it = sorted((t[1], t[2]) for t in seen.values() if t[0] == latest[0])
    idle = sum(max(nxt[0] - cur[1], 0.0) for cur, nxt in zip(on_it, on_it[1:], strict=False))
    return Measured(latest[3], {p: t[4] for p, t in seen.items()}, idle / len(on_it))


def stack_bills(sel, only: set[str] | None = None) -> list[StackBill]:
    """One bill per stack with points to run (the selection's stale points, as its jobs are sized);
    ``only``: the stacks of these recipes."""
    bills, seen = [], set()
    for r in sel.selected:
        if only is not None and r.name not in only:
            continue
        mates = sel.stacks.mates(r.name)
        if mates in seen:
            continue
        seen.add(mates)
        reuse = sel.index.reuse(r.name)
        points = sel.stacks.stale_points(r.name) if reuse else [(r.name, c) for c in sel.run.curve_points(r.name)]
        if not points:
            continue
        bills.append(_bill(sel, r.name, mates, points, reuse))
    return bills


def _bill(sel, recipe: str, mates: tuple[str, ...], points: list[tuple[str, int]], reuse: bool) -> StackBill:
    res = sel.index.facts(*points[0]).resources
    m = measured(sel.root, [(n, c) for n in mates for c in sel.recipes[n].concurrency])
    bound = {p: sel.index.facts(*p).resources["point_s"] for p in points}
    share = _kept_share(sel)
    expected = sum(share.get(p[0], 1.0) * (m.bench_s[p] + m.idle_per_point_s if p in m.bench_s else bound[p])
                   for p in points)  # fmt: skip
    return StackBill(
        recipes=mates,
        points=len(points),
        gpus=res["nodes"] * res["gpus_per_node"],
        allocations=1 if reuse else len(points),
        startup_s=m.startup_s if m.startup_s is not None else res["startup_s"],
        startup_measured=m.startup_s is not None,
        points_s=sum(bound.values()),
        probes_s=sel.stacks.points_s(recipe, []) if reuse else 0.0,
        linger_s=sel.stacks.linger_s(recipe) if reuse else 0.0,
        checks_s=CHECK_S * sum(len(sel.recipes[n].evals) for n in mates),
        expected_points_s=expected,
        points_measured=sum(p in m.bench_s for p in points),
    )


def _kept_share(sel) -> dict[str, float]:
    """Variant -> the share of its waiting halving sweep that the decision keeps in full (best K of V):
    the expected bill counts that share of their points, the bound all of them (every variant tied)."""
    return {
        r.name: keep_count(len(waiting), r.sweep["halving"]) / len(waiting)
        for waiting in sel.pending.values()
        for r in waiting
    }


@dataclass(frozen=True)
class TrialsBill:
    """A running search's trials still to choose (their stacks are not known when the run starts)."""

    recipe: str
    trials: int
    gpu_h: float  # an average untried variant's, each
    gpu_h_bound: float  # the costliest untried variants'
    points: int  # at most, counted in the bound
    line: str  # what the sweep's expansion says of them


def _search_bill(sel, recipe: str, info: dict, chosen: int) -> TrialsBill:
    """What a running search's trials still to choose add to the run: the first round's stacks are
    known and billed as any, the later trials priced apart (the sweep's line, the run's bill, the
    summary's bill against the spend)."""
    spec, candidates = settings(info), sel.searching[recipe]
    left = min(spec["trials"], chosen + len(candidates)) - chosen
    bills = sorted(
        (_bill(sel, r.name, (r.name,), [(r.name, c) for c in r.concurrency], sel.index.reuse(r.name))
         for r in candidates),
        key=lambda b: b.gpu_h_bound, reverse=True,
    )  # fmt: skip
    points = sum(sorted((len(r.concurrency) for r in candidates), reverse=True)[:left])
    line = (
        f"sweep {recipe}: search: {chosen} of {chosen + left} trial(s) chosen so far; the other {left} chosen by "
        f"the search (a balanced start, then optuna's TPE; seed {spec['seed']}, {spec['batch']} at a time) from "
        f"the scores at c{spec['target']} as they come in, in this run: up to {points} point(s), counted in the bound"
    )
    expected = left / len(candidates) * sum(b.gpu_h for b in bills)
    return TrialsBill(recipe, left, expected, sum(b.gpu_h_bound for b in bills[:left]), points, line)


def trials_bills(sel) -> dict[str, TrialsBill]:
    """Each running search's trials still to choose, by sweep."""
    out = {}
    for recipe in sorted(sel.searching):
        chosen = [r for r in sel.selected if r.sweep_of == recipe]
        out[recipe] = _search_bill(sel, recipe, (chosen or sel.searching[recipe])[0].sweep, len(chosen))
    return out


def bill_lines(bills: list[StackBill], trials: list[TrialsBill] = ()) -> list[str]:
    if not bills and not trials:
        return []
    formula = "GPUs x (startup per allocation + points + probes' worst case + evals + linger)"
    out = [f"bill of this run (GPU-hours = {formula}; points measured where they were before, else at their bound):"]
    for b in bills:
        startup = f"{b.startup_s:.0f} s {'measured' if b.startup_measured else 'bound'}"
        expected = b.points_s if b.expected_points_s is None else b.expected_points_s
        out.append(
            f"  {', '.join(b.recipes)}: {b.points} point(s), {b.allocations} allocation(s) of {b.gpus} GPU(s), "
            f"startup {startup}, points {expected:.0f} s ({b.points_measured} measured; bound {b.points_s:.0f} s), "
            f"probes ≤ {b.probes_s:.0f} s, evals ≤ {b.checks_s:.0f} s, linger {b.linger_s:.0f} s"
            f" = {b.gpu_h:.2f} GPU-h (bound {b.gpu_h_bound:.2f})"
        )
    for t in trials:
        out.append(f"  {t.recipe}: up to {t.trials} trial stack(s) as the search chooses them"
                   f" = {t.gpu_h:.2f} GPU-h (bound {t.gpu_h_bound:.2f})")  # fmt: skip
    both = [*bills, *trials]
    total_h, bound_h = sum(b.gpu_h for b in both), sum(b.gpu_h_bound for b in both)
    allocations = sum(b.allocations for b in bills) + sum(t.trials for t in trials)
    count = f"up to {allocations}" if trials else allocations
    out.append(f"  total: {count} allocation(s), {total_h:.2f} GPU-h expected, {bound_h:.2f} GPU-h bound")
    return out


def bill_doc(bills: list[StackBill], when: str, trials: list[TrialsBill] = ()) -> dict:
    """What the summary compares with the spend: the bill as the run started (``when``, UTC ISO)."""
    stacks = [
        {"recipes": list(b.recipes), "allocations": b.allocations, "gpu_h": round(b.gpu_h, 4),
         "gpu_h_bound": round(b.gpu_h_bound, 4)}
        for b in bills
    ]  # fmt: skip
    searches = [
        {"recipe": t.recipe, "trials": t.trials, "gpu_h": round(t.gpu_h, 4), "gpu_h_bound": round(t.gpu_h_bound, 4)}
        for t in trials
    ]
    both = [*bills, *trials]
    return {
        "time": when,
        "stacks": stacks,
        "searches": searches,  # trials still to choose as the run started, priced apart
        "gpu_h": round(sum(b.gpu_h for b in both), 4),
        "gpu_h_bound": round(sum(b.gpu_h_bound for b in both), 4),
    }


RUN_BUDGET_GPU_H: list[float] = []  # --config budget_gpu_h (rules/common.smk): every sweep's budget


def say_bill(sel) -> None:
    """On stderr, before anything is submitted: each sweep's expansion and bill (a sweep over its
    budget is refused here), then on a cluster the run's bill."""
    swept = {r.name for r in sel.selected if r.sweep_of}
    if not sel.index.submits_jobs and not swept:
        return
    bills, trials = stack_bills(sel, None if sel.index.submits_jobs else swept), trials_bills(sel)
    for line in sweep_lines(sel, bills, trials, RUN_BUDGET_GPU_H[0] if RUN_BUDGET_GPU_H else None):
        print(f"servesweep: {line}", file=sys.stderr)
    if not sel.index.submits_jobs:
        return
    for line in bill_lines(bills, list(trials.values())):
        print(f"servesweep: {line}", file=sys.stderr)


def sweep_lines(sel, bills: list[StackBill], trials: dict[str, TrialsBill], budget: float | None) -> list[str]:
    """'sweep R: V variants (E excluded), P points, S stacks, X GPU-h expected, Y bound'; raise
    InputError for a sweep whose bound exceeds its budget (the recipe's, or --config budget_gpu_h)."""
    out, over = [], []
    sweeps = {r.sweep_of: r.sweep for r in sel.selected if r.sweep_of}
    for recipe, info in sorted(sweeps.items()):
        names = {r.name for r in sel.selected if r.sweep_of == recipe}
        screens = sum(r.screen for r in sel.selected if r.sweep_of == recipe)
        deferred, waiting = sel.not_run.get(recipe, {}), sel.pending.get(recipe, [])
        full = sum(len(sel.run.curve_points(r.name)) for r in waiting)  # after the screens, at most
        if waiting:
            keep = keep_count(len(waiting), info["halving"])
            out.append(f"sweep {recipe}: halving: {screens} screen(s) first; then, in this run, the best {keep} of "
                       f"{len(waiting)} variant(s) (and any tied with them) in full on their screens' stacks: up to "
                       f"{full} point(s), counted in the bound")  # fmt: skip
        elif deferred and not sel.searching.get(recipe):
            out.append(f"sweep {recipe}: {info['strategy']}: {len(deferred)} variant(s) not measured in full, e.g. "
                       f"{next(iter(deferred))}: {next(iter(deferred.values()))}")  # fmt: skip
        mine = [b for b in bills if set(b.recipes) & names]
        points = sum(len(sel.run.curve_points(n)) for n in names) + full
        expected, bound = sum(b.gpu_h for b in mine), sum(b.gpu_h_bound for b in mine)
        stacks = f"{len(mine)} stack(s)"
        if recipe in trials:
            more = trials[recipe]
            out.append(more.line)
            points, expected, bound = points + more.points, expected + more.gpu_h, bound + more.gpu_h_bound
            stacks += f" and up to {more.trials} more as trials are chosen"
        limit = budget if budget is not None else info.get("budget_gpu_h")
        out.append(
            f"sweep {recipe}: {len(info['variants'])} variant(s) ({len(info['excluded'])} excluded; "
            f"{len(names) - screens} selected in full, {screens} screen(s)), {points} point(s) to run "
            f"on {stacks}, {expected:.2f} GPU-h expected, {bound:.2f} GPU-h bound"
            + (f" (budget {limit:g} GPU-h)" if limit is not None else "")
        )
        if limit is not None and bound > limit:
            field = "--config budget_gpu_h" if budget is not None else "sweep.budget_gpu_h"
            reason = (
                f"this run of the sweep is bound at {bound:.2f} GPU-h ({expected:.2f} expected), over its budget of "
                f"{limit:g} GPU-h: nothing was submitted; select fewer variants, exclude some, or raise the budget"
            )
            over.append(Problem(sel.recipes[next(iter(names))].source, field, reason))
    if over:
        raise InputError(over)
    return out

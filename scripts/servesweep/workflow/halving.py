"""Successive halving for a sweep too big to run in full (render/sweep, strategy: halving).

Round one measures every variant's *screen* (the variant at the target load, for a share of the
benchmark); round two measures in full only the best share of them, in the same run and on the
stacks the screens started (each screen's stack waits, ``deciding``, until the last screen is in:
rulekit's ``halving_results`` asks for the screens as checkpoints). Where every screen already has a
current result, the round is decided when the workflow loads. Every trial is an ordinary file
target: a resumed search reruns nothing it has."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from ..capacity.slo import slo_verdicts
from ..contract import figures
from ..contract.marks import STOPPING_SEARCH, marks_of
from ..contract.paths import RESULT_SCHEMA_FILE, result_file
from ..fileio.yamlio import checked_json
from ..render.sweep import HALVING_DEFAULTS


@dataclass(frozen=True)
class Screened:
    variant: str
    met: bool
    worst: float  # the largest share of its SLO limit a figure used (1.0: at the limit)
    tps: float  # total tok/s per GPU
    unjudged: str = ""  # why its figures cannot rank it (a client-bound, not-streamed or stalled screen)

    def key(self) -> tuple:
        return (self.met, -self.worst, self.tps)


def screened(root: Path, screen, target: int, rehearsal: bool = False, plan: str | None = None) -> Screened | None:
    """A screen's standing from its result (None: no usable result yet, or one of another ``plan``
    than the screen's current one); a rehearsal's from its own."""
    doc, _why = checked_json(root / result_file(screen.name, target, rehearsal), RESULT_SCHEMA_FILE)
    if doc is None or (plan is not None and doc["identity"]["plan_fingerprint"] != plan):
        return None
    variant = screen.variant_name
    marked = [m["reason"] for m in marks_of(doc) if m["mark"] in STOPPING_SEARCH]
    if marked:
        return Screened(variant, False, math.inf, 0.0, unjudged=marked[0])
    f, slo = doc["figures"], screen.doc.get("slo") or {}
    verdict = slo_verdicts(slo, f)
    ratios = [_share(v) for v in verdict["verdicts"]]
    tps = figures.BY_NAME["total_tps_per_gpu"].of(f) or 0.0
    return Screened(variant, verdict["met"] is not False, max(ratios, default=0.0), tps)


def _share(verdict: dict) -> float:
    """How much of its SLO limit a figure used; unmeasured counts as over every limit."""
    if verdict["value"] is None or not verdict["limit"]:
        return math.inf
    return verdict["value"] / verdict["limit"]


SCREEN_NOISE = 0.10  # a screen is short: SLO shares or throughputs within 10 % are not told apart


def _tied(a: Screened, b: Screened) -> bool:
    if a.met != b.met:
        return False
    if math.inf in (a.worst, b.worst):  # an unmeasured limited figure ties only with another
        close = a.worst == b.worst
    else:
        close = abs(a.worst - b.worst) <= SCREEN_NOISE * max(a.worst, b.worst)
    return close and abs(a.tps - b.tps) <= SCREEN_NOISE * max(a.tps, b.tps)


def _used(worst: float) -> str:
    return f"{worst:.0%} of its tightest limit" if math.isfinite(worst) else "a limited figure unmeasured"


def keep_count(n: int, halving: dict) -> int:
    return max(1, math.ceil(n * halving.get("keep", HALVING_DEFAULTS["keep"])))


WAITS = "waits for the halving screens"


def undecided(not_run: dict[str, str]) -> bool:
    """Whether a sweep's round waits for screens (its variants run once they are in)."""
    return bool(not_run) and all(why.startswith(WAITS) for why in not_run.values())


def decide(screens: list[Screened | None], names: list[str], halving: dict) -> dict[str, str]:
    """Variant -> why it is not measured in full (kept variants are not named)."""
    missing = [n for n, s in zip(names, screens, strict=True) if s is None]
    if missing:
        return dict.fromkeys(names, f"{WAITS} ({len(names) - len(missing)} of {len(names)} measured)")  # this run
    # a screen its marks leave unjudged is measured in full: a starved client decides nothing
    order = sorted((s for s in screens if not s.unjudged), key=lambda s: s.key(), reverse=True)
    keep = share = keep_count(len(screens), halving)
    # a screen the last one kept by share is not ahead of is kept too (a short run decides no tie):
    # judged against that screen, never chained from one tie to the next through a dense field
    while keep < len(order) and _tied(order[keep], order[share - 1]):
        keep += 1
    target = halving["target"]
    return {
        s.variant: (
            f"screened out: {rank} of {len(order)} at c{target} "
            f"({'SLO met' if s.met else 'SLO missed'}, {_used(s.worst)}, {s.tps:,.0f} tok/s/GPU)"
        )
        for rank, s in enumerate(order, 1)
        if rank > keep
    }


def halving_round(root: Path, selected: list, rehearsal: bool = False, plan_of=None) -> dict[str, dict[str, str]]:
    """Per halving sweep among the selected recipes: its full variants not to run, with why (a
    rehearsal decides from its own screens: results/rehearsal/). ``plan_of``: (screen, conc) -> its
    plan fingerprint (a screen's result of another plan is not in yet)."""
    bases = sorted({r.sweep_of for r in selected if r.sweep_of and r.sweep["strategy"] == "halving"})
    return {base: why for base in bases if (why := sweep_round(root, selected, base, rehearsal, plan_of)) is not None}


def sweep_round(root: Path, selected: list, base: str, rehearsal: bool, plan_of=None) -> dict[str, str] | None:
    """One halving sweep's round (None: none of its screens is selected)."""
    screens = screens_of(selected, base)
    return decide_screens(screens, standings(root, screens, rehearsal, plan_of)) if screens else None


def standings(root: Path, screens: list, rehearsal: bool, plan_of=None) -> list[Screened | None]:
    """Each screen's standing from its current result (None: not in yet)."""
    target = screens[0].sweep["halving"]["target"]
    return [screened(root, s, target, rehearsal, plan_of(s.name, target) if plan_of else None) for s in screens]


def decide_screens(screens: list, found: list[Screened | None]) -> dict[str, str]:
    return decide(found, [s.variant_name for s in screens], screens[0].sweep["halving"])


def screens_of(selected: list, base: str) -> list:
    return [r for r in selected if r.sweep_of == base and r.screen]

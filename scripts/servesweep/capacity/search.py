"""Capacity at SLO, the search: the highest concurrency a recipe holds within every SLO.

The search probes ordinary points (``results/<recipe>/c<conc>.json``), so every probe is cached,
stale exactly when a point is, and reused by later searches and by the plain sweep. It is
exponential from ``min`` until a probe misses, then bisects to ``tolerance``; every known probe
inside the bounds narrows it, wherever it came from. Pure and light: the workflow decides the
next probe with it while Snakemake builds its DAG, the capacity rule decides again from results.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..contract.marks import STOPPING_SEARCH, marks_of
from ..fileio.errors import Problem
from .slo import slo_verdicts


@dataclass(frozen=True)
class Bounds:
    low: int
    high: int
    tolerance: int

    @classmethod
    def of(cls, doc: dict) -> Bounds:
        return cls(int(doc["min"]), int(doc["max"]), int(doc.get("tolerance", 1)))

    def to_json(self) -> dict:
        return {"min": self.low, "max": self.high, "tolerance": self.tolerance}

    def __contains__(self, conc: int) -> bool:
        return self.low <= conc <= self.high


@dataclass(frozen=True)
class Decision:
    held: int | None  # highest known concurrency meeting the SLO below the first miss
    missed: int | None  # lowest known concurrency missing it
    next: int | None  # the probe to run next; None once decided
    ignored: tuple[int, ...] = ()  # met the SLO above the first miss: noise, not capacity
    stopped: tuple[str, ...] = ()  # probes whose figures cannot decide (marked): the search stops, naming them

    @property
    def done(self) -> bool:
        return self.next is None

    @property
    def outcome(self) -> str:
        if self.stopped:
            return "stopped: " + "; ".join(self.stopped)
        if self.missed is None:
            return "meets the SLO at max"
        if self.held is None:
            return "misses the SLO at min"
        return "within tolerance"


def decide(bounds: Bounds, met: dict[int, bool | str]) -> Decision:
    """The search state from what is known: concurrency -> met every SLO, or why its probe cannot
    decide (a client-bound, not streamed or stalled point: ``probe_met``), which stops the search."""
    known = {c: ok for c, ok in met.items() if c in bounds}
    stops = tuple(f"c{c} {why}" for c, why in sorted(known.items()) if isinstance(why, str))
    if stops:
        return Decision(None, None, None, (), stops)
    missed = min((c for c, ok in known.items() if not ok), default=None)
    below = [c for c, ok in known.items() if ok and (missed is None or c < missed)]
    held = max(below, default=None)
    ignored = tuple(sorted(c for c, ok in known.items() if ok and missed is not None and c > missed))
    if missed is None:  # exponential until a miss or max
        nxt = bounds.low if held is None else (None if held >= bounds.high else min(2 * held, bounds.high))
    elif held is None:
        nxt = None if missed == bounds.low else bounds.low
    else:
        nxt = None if missed - held <= bounds.tolerance else (held + missed) // 2
    return Decision(held, missed, nxt, ignored)


def _halvings(width: int, tolerance: int) -> int:
    n = 0
    while width > tolerance:
        width, n = (width + 1) // 2, n + 1
    return n


def probes_left_at_most(bounds: Bounds, d: Decision) -> int:
    """Worst case of the probes still to run, the next one included."""
    if d.done:
        return 0
    if d.missed is not None and d.held is not None:
        return _halvings(d.missed - d.held, bounds.tolerance)
    if d.missed is not None:  # min itself, then bisection above it
        return 1 + _halvings(d.missed - bounds.low, bounds.tolerance)
    chain, c = [d.next], d.next
    while c < bounds.high:
        c = min(2 * c, bounds.high)
        chain.append(c)
    worst = len(chain)  # every probe meets the SLO
    for i, c in enumerate(chain):  # or the first miss is at c
        lower = chain[i - 1] if i else d.held
        if lower is not None:
            worst = max(worst, i + 1 + _halvings(c - lower, bounds.tolerance))
    return worst


def probe_met(doc: dict, slo: dict) -> bool | str:
    """Whether a probe met every SLO; or, where its figures cannot decide, why (its marks)."""
    stops = [m["reason"] for m in marks_of(doc) if m["mark"] in STOPPING_SEARCH]
    return "; ".join(stops) if stops else bool(slo_verdicts(slo, doc["figures"])["met"])


def _sign(ok) -> str:
    return "⚠" if isinstance(ok, str) else ("✓" if ok else "✗")


def describe(recipe: str, bounds: Bounds, met: dict[int, bool], d: Decision) -> str:
    """One line for the dry run: which probes are known, which one runs next."""
    known = " ".join(f"c{c} {_sign(ok)}" for c, ok in sorted(met.items()) if c in bounds) or "none"
    head = f"capacity of {recipe} (c{bounds.low}..c{bounds.high}, tolerance {bounds.tolerance}): known {known}"
    if d.done:
        return f"{head}; decided: {d.outcome}, capacity {'–' if d.held is None else f'c{d.held}'}"
    left = probes_left_at_most(bounds, d)
    return f"{head}; next probe c{d.next}, at most {left} probe(s) still to run"


def capacity_problems(doc: dict, label: str) -> list[Problem]:
    """A recipe's capacity search that cannot run: bounds the wrong way round, no SLO to search against."""
    cap = doc.get("capacity")
    if cap is None:
        return []
    out = []
    if cap["max"] < cap["min"]:
        out.append(Problem(label, "capacity.max", f"max {cap['max']} is below min {cap['min']}"))
    if not doc.get("slo"):
        out.append(Problem(label, "capacity", "a capacity search needs an slo to search against"))
    return out

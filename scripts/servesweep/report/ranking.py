"""Who leads, if anyone: the one tie rule of every ranking (the best-setup table, capacity, tuning).

A leader must be ahead of every other comparable candidate beyond the noise: the sum of both
confidence half-widths where both were measured with repeats, else the declared band
(contract/figures.NOISE_BAND) of the lower value. Only candidates measured with the same client
settings (duration, warm-up, scenario: ``settings``) are compared; a marked candidate is never ranked.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..contract.figures import NOISE_BAND


@dataclass(frozen=True)
class Candidate:
    name: str  # what the table names: a recipe, a setup
    value: float  # the figure ranked on
    half_width: float | None = None  # half its confidence interval, with repeats
    settings: object = None  # the client settings it was measured with (hashable); None: unknown, compared with any
    marks: tuple[str, ...] = ()  # why it cannot be ranked (run/trust marks, failed checks)


@dataclass(frozen=True)
class Ranking:
    leader: Candidate | None  # ahead of every other beyond the noise; None when tied or none rankable
    tied: tuple[Candidate, ...] = ()  # the candidates within noise of the top, the top first, when tied
    not_compared: tuple[Candidate, ...] = field(default=())  # other client settings, or marked

    @property
    def label(self) -> str:
        """'fast', 'tied: fast, dense' or '–'."""
        if self.leader is not None:
            return self.leader.name
        return "tied: " + ", ".join(c.name for c in self.tied) if self.tied else "–"


def _usable(c: Candidate) -> bool:
    return not c.marks and c.value is not None and not (isinstance(c.value, float) and math.isnan(c.value))


def _hw(c: Candidate) -> float | None:
    hw = c.half_width
    return None if hw is None or (isinstance(hw, float) and math.isnan(hw)) else hw


def noise(a: Candidate, b: Candidate, band: float = NOISE_BAND) -> float:
    """How far two values may differ by noise alone."""
    ha, hb = _hw(a), _hw(b)
    if ha is not None and hb is not None:
        return ha + hb
    return band * min(abs(a.value), abs(b.value))  # as the tuning table's ahead() counts it


def leader(candidates, higher_is_better: bool = True, band: float = NOISE_BAND) -> Ranking:
    """The leader of ``candidates`` (Candidate), or the tied set. Marked candidates and those measured
    with other client settings than the best unmarked one are not compared (returned as such)."""
    usable = [c for c in candidates if _usable(c)]
    if not usable:
        return Ranking(None, (), tuple(candidates))
    sign = 1 if higher_is_better else -1
    ordered = sorted(usable, key=lambda c: -sign * c.value)
    top = ordered[0]
    same = [c for c in ordered if None in (c.settings, top.settings) or c.settings == top.settings]
    others = tuple(c for c in candidates if c not in same)
    close = [c for c in same[1:] if sign * (top.value - c.value) <= noise(top, c, band)]
    if close:
        return Ranking(None, (top, *close), others)
    return Ranking(top, (), others)

"""A sweep axis must change what runs: two variants that differ only in one axis, rendered for the
same point with their names set aside, must not have the same plan."""

from __future__ import annotations

from ..fileio.encode import canonical
from ..fileio.errors import Problem
from ..render.plan import render


def _plan_text(recipe, cluster) -> str:
    """The recipe's first point's plan without what its name alone decides."""
    plan = {k: v for k, v in render(recipe, cluster, recipe.concurrency[0]).items() if k != "fingerprints"}
    return canonical(plan).replace(recipe.name, "<variant>")


def idle_axes(selected: list, cluster) -> list[Problem]:
    """One problem per axis of a selected sweep whose values leave the plan as it is."""
    out = []
    for base in sorted({r.sweep_of for r in selected if r.sweep_of}):
        variants = [r for r in selected if r.sweep_of == base and not r.screen]
        first = variants[0]
        texts = {first.name: _plan_text(first, cluster)}
        for axis in first.sweep["axes"]:
            mate = next((v for v in variants if _differ_only_in(first.choice, v.choice, axis)), None)
            if mate is None:
                continue
            if _plan_text(mate, cluster) == texts[first.name]:
                field = f"sweep.axes.{axis}"
                reason = (
                    f"axis {axis} ({first.sweep['axes'][axis]['field']}) changes no plan: variants "
                    f"{first.variant} and {mate.variant} would run the same thing; remove the axis"
                )
                out.append(Problem(first.source, field, reason))
    return out


def _differ_only_in(a: tuple, b: tuple, axis: str) -> bool:
    da, db = dict(a), dict(b)
    return da[axis] != db[axis] and all(da[k] == db[k] for k in da if k != axis)

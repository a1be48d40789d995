"""`servesweep diff A B` (recipes, plans or results, any mix; or two API smoke files, row by row) and
`servesweep why [RECIPE...]`.

Each argument becomes (source, plan fingerprint, point): a recipe is rendered (``--cluster``,
``--conc``), a plan brings the source render wrote next to it, a result the source it recorded.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ..contract.plan import plan_source
from ..fileio.errors import InputError, Problem
from ..render.cluster import all_clusters
from ..render.loading import load_recipes
from ..render.plan import render
from ..report.sourcediff import Change, source_changes
from . import why


@dataclass(frozen=True)
class Measured:
    """What one argument says about a measurement."""

    label: str
    source: dict | None
    fingerprint: str
    point: int


def load_measured(arg: str, cluster: str | None, conc: int | None) -> Measured:
    path = Path(arg)
    if not path.is_file():
        raise InputError([Problem(arg, "", "no such file (a recipe .yaml, a plan or a result .json)")])
    if path.suffix in (".yaml", ".yml"):
        return _from_recipe(path, cluster, conc)
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise InputError([Problem(arg, "", f"not readable JSON: {e}")]) from None
    kind = str(doc.get("schema", "")) if isinstance(doc, dict) else ""
    if kind.startswith("servesweep.plan/"):
        fp = doc.get("fingerprints") or {}
        return Measured(arg, plan_source(path, fp.get("curve")), fp.get("plan", ""), doc.get("point", 0))
    if kind.startswith("servesweep.result/"):
        ident = doc.get("identity") or {}
        return Measured(arg, doc.get("source"), ident.get("plan_fingerprint", ""), ident.get("point", 0))
    raise InputError([Problem(arg, "schema", f"neither a plan nor a result ({kind or 'no schema'})")])


def _from_recipe(path: Path, cluster: str | None, conc: int | None) -> Measured:
    clusters = all_clusters()
    recipes, problems = load_recipes([path], clusters, cluster)
    if problems:
        raise InputError(problems)
    (recipe,) = recipes
    name = cluster or recipe.clusters[0]
    if name not in recipe.clusters:
        raise InputError([Problem(str(path), "clusters", f"recipe does not run on cluster {name!r}")])
    point = conc if conc is not None else recipe.concurrency[0]
    plan = render(recipe, clusters[name], point)
    data = {"data": plan["data"], "model_data": plan["model_data"]}
    src = why.source_doc(recipe, clusters[name], False, plan["fingerprints"]["curve"], data)
    return Measured(str(path), src, plan["fingerprints"]["plan"], point)


def diff_lines(a: Measured, b: Measured) -> tuple[list[str], bool]:
    """(lines, same measurement)."""
    same = a.fingerprint == b.fingerprint
    changes: list[Change] = []
    if a.point != b.point:
        changes.append(Change("point", "concurrency", a.point, b.point))
    if a.source is None or b.source is None:
        missing = a.label if a.source is None else b.label
        lines = [f"{missing}: no recorded source (measured or rendered before servesweep kept one)"]
        lines.append("same plan fingerprint" if same else "plan fingerprints differ")
        return lines, same
    changes += source_changes(a.source, b.source)
    lines = [str(c) for c in changes]
    if same:
        note = ": the differences above change nothing" if changes else ""
        lines.append(f"same measurement (plan fingerprint equal){note}")
    elif changes and all(c.where == "data" for c in changes):
        lines.append("same plan, different data: not the same measurement")
    elif not changes:
        lines.append("same recipe and cluster facts, but servesweep renders the plan differently")
    return lines, same


def cmd_diff(a) -> int:
    from ..report import smoke_diff

    if smoke_diff.is_smoke(Path(a.a)) and smoke_diff.is_smoke(Path(a.b)):
        lines, same = smoke_diff.diff_lines(*(smoke_diff.load(Path(x)) for x in (a.a, a.b)), (a.a, a.b))
        print("\n".join(lines))
        return 0 if same else 1
    left, right = (load_measured(x, a.cluster, a.conc) for x in (a.a, a.b))
    lines, same = diff_lines(left, right)
    print("\n".join(lines))
    return 0 if same else 1


def cmd_why(a) -> int:
    """Every cause line of the dry run, uncut."""
    from .selection import Selection

    sel = Selection(Path.cwd(), a.cluster, a.recipes or None)  # reads and renders, writes nothing
    lines = why.cause_lines(sel.staleness(), limit=None)
    print("\n".join(lines) if lines else "nothing stale: every selected point has a current result")
    return 0

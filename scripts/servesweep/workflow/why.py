"""Why a point reruns, in recipe terms: each recipe's sources, and the dry run's cause lines.

Render writes ``.plans/<recipe>/source.json`` (the recipe as written, the cluster facts, the plan
format, the curve fingerprint); the driver copies it into the result when the fingerprint matches.
A stale point is then explained by comparing the source its result was measured from with the
current one; cluster facts that changed are named only if the recipe's plans use them.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from ..checks.evalsets import settings_doc
from ..contract import paths
from ..contract.paths import result_file
from ..contract.plan import PLAN_SCHEMA
from ..fileio.encode import canonical, digest
from ..fileio.yamlio import checked_json
from ..render.cluster import Cluster, _from_doc
from ..render.plan import data_inputs, render
from ..render.recipe import Recipe
from ..report.sourcediff import _ABSENT, CUT, SOURCE_SCHEMA, Change, cut, reporting_changes, source_changes

MAX_LINES = 20  # the dry run's cause lines before "… N more"


def source_doc(recipe: Recipe, cluster: Cluster, rehearsal: bool, curve_fingerprint: str, data=None) -> dict:
    """``data``: what the points read (the plan's ``data`` and ``model_data``); read here when not given."""
    return {
        "schema": SOURCE_SCHEMA,
        "plan_schema": PLAN_SCHEMA,
        "recipe": {"name": recipe.name, "file": recipe.source, "doc": recipe.doc},
        "cluster": {"name": cluster.name, "file": cluster.source, "doc": cluster.doc},
        "rehearsal": rehearsal,
        "curve_fingerprint": curve_fingerprint,
        "data": data if data is not None else data_inputs(recipe, cluster),
    }


def read_result(path: Path) -> tuple[dict | None, str | None]:
    """(result document, None) or (None, why it cannot be trusted: unreadable, not JSON, or not
    matching the result schema)."""
    return checked_json(path, paths.RESULT_SCHEMA_FILE)


def quarantine(root: Path, recipes: list[str], move: bool = True) -> list[str]:
    """One line per unusable result of these recipes. With ``move`` (a
    real run, never a dry run) move it aside (``c4.json.unreadable-1``: its bytes are kept) so
    Snakemake sees the point missing and reruns it. A dry run moves nothing: it writes a marker
    beside the point's plan (``paths.damaged_marker``, an input of the point's rule, newer than the
    result), so `snakemake -n` lists the point as the real run will run it. A symbolic link is
    neither read nor moved."""
    lines = []
    for name in recipes:
        damaged = set()
        folder = root / paths.RESULTS / name
        if folder.is_symlink():
            lines.append(f"{folder.relative_to(root)}: a symbolic link: never followed; move it away yourself")
            continue
        for conc, path in paths.point_files(folder):
            if not (path.is_file() or path.is_symlink()):
                continue
            line = _quarantined(root, path, move)
            if line:
                lines.append(line)
                damaged |= set() if path.is_symlink() or move else {conc}
        _mark_damaged(root, name, damaged)
    return lines


def _quarantined(root: Path, path: Path, move: bool) -> str | None:
    """The line for one result that cannot be used (moved aside with ``move``), or None."""
    rel = path.relative_to(root)
    if path.is_symlink():
        return f"{rel}: a symbolic link: never followed; move it away yourself"
    doc, reason = read_result(path)
    if doc is not None:
        return None
    if not move:
        return f"{rel}: {reason}: a real run moves it aside and reruns the point (listed; this dry run moved nothing)"
    n = 1
    while (aside := path.with_name(f"{path.name}.unreadable-{n}")).exists():
        n += 1
    path.rename(aside)
    return f"{rel}: {reason}: moved to {aside.name}; the point reruns"


def _mark_damaged(root: Path, recipe: str, concs: set) -> None:
    """Exactly the damaged points' markers: written (kept unchanged when already there), the others removed."""
    for conc in concs:
        marker, result = root / paths.damaged_marker(recipe, conc), root / result_file(recipe, conc)
        if not marker.exists() or marker.stat().st_mtime_ns <= result.stat().st_mtime_ns:
            marker.parent.mkdir(parents=True, exist_ok=True)
            marker.write_text(f"{result_file(recipe, conc)} is damaged: the point is remeasured\n")
            if marker.stat().st_mtime_ns <= result.stat().st_mtime_ns:  # a result dated in the future
                os.utime(marker, ns=(result.stat().st_mtime_ns + 1_000_000_000,) * 2)
    for marker in (root / paths.damaged_marker(recipe, 1)).parent.glob("c*.damaged"):
        if not (marker.stem[1:].isdigit() and int(marker.stem[1:]) in concs):
            marker.unlink(missing_ok=True)


def used_changes(changes: list[Change], recipe: Recipe, cluster: Cluster, conc: int, fingerprint: str) -> list[Change]:
    """Of the changes, drop cluster facts this recipe's plan does not use: put each old value back
    into the current cluster facts and render again; a fact whose old value renders the same plan
    is not a cause."""
    out = []
    for c in changes:
        if not c.where.startswith("cluster ") or c.old is _ABSENT:
            out.append(c)
            continue
        doc = _with_value(cluster.doc, c.field, c.old)
        try:
            old_plan = render(recipe, _from_doc(doc, cluster.source), conc)
        except Exception:  # noqa: BLE001 - the old value no longer renders: it is a cause
            out.append(c)
            continue
        if old_plan["fingerprints"]["plan"] != fingerprint:
            out.append(c)
    return out


def _with_value(doc: dict, dotted: str, value) -> dict:
    out = json.loads(json.dumps(doc))
    node, keys = out, dotted.split(".")
    for k in keys[:-1]:
        node = node.setdefault(k, {})
    node[keys[-1]] = value
    return out


@dataclass
class RecipeStaleness:
    """One recipe's points: stale by cause, missing, unreadable, and reporting-only edits."""

    recipe: str
    causes: dict = field(default_factory=dict)  # full cause text -> ([Change] or a sentence, [conc])
    new: list = field(default_factory=list)
    no_result: list = field(default_factory=list)
    unreadable: list = field(default_factory=list)  # (conc, reason)
    reporting: list = field(default_factory=list)  # Change
    checks: list = field(default_factory=list)  # one line per stale check (smoke, evals)

    def lines(self, limit: int | None = CUT) -> list[str]:
        r, out = self.recipe, []
        for what, concs in self.causes.values():
            text = what if isinstance(what, str) else cut(what, f"servesweep why {r}", limit or len(what))
            out.append(f"{r}: {_points(concs)} stale — {text}")
        if self.new:
            out.append(f"{r} {_concs(self.new)}: new point{'s' if len(self.new) > 1 else ''}")
        if self.no_result:
            out.append(f"{r} {_concs(self.no_result)}: no result")
        out += [f"{r} c{c}: result unreadable ({why})" for c, why in self.unreadable]
        if not out and self.reporting:
            text = cut(self.reporting, f"servesweep why {r}", limit or len(self.reporting))
            out.append(f"{r}: {text} — summary only, no point stale")
        return out + [f"{r} {line}" for line in self.checks]


def _points(concs: list) -> str:
    return f"{len(concs)} point{'s' if len(concs) > 1 else ''} ({_concs(concs)})"


def _concs(concs: list, shown: int = 12) -> str:
    """A bounded list: a long curve's line stays readable."""
    ordered = sorted(concs)
    more = f", … and {len(ordered) - shown} more" if len(ordered) > shown else ""
    return ", ".join(f"c{c}" for c in ordered[:shown]) + more


def recipe_staleness(root: Path, recipe: Recipe, cluster: Cluster, fingerprint, curve: str) -> RecipeStaleness:
    """``fingerprint(conc)``: the point's current plan fingerprint; ``curve``: the recipe's curve one."""
    now = source_doc(recipe, cluster, False, curve)
    st, sources, explained = RecipeStaleness(recipe.name), [], {}
    missing, present = [], _listing((root / result_file(recipe.name, recipe.concurrency[0])).parent)
    for conc in recipe.concurrency:
        path = root / result_file(recipe.name, conc)
        if path.name not in present:
            missing.append(conc)
            continue
        doc, why = read_result(path)
        if doc is None:
            st.unreadable.append((conc, why))
            continue
        src = doc.get("source") if isinstance(doc.get("source"), dict) else None
        sources += [src] if src else []
        current = fingerprint(conc)
        if doc["identity"]["plan_fingerprint"] == current:
            if src and not st.reporting:
                st.reporting = reporting_changes(src, now)
            continue
        key = json.dumps(src, sort_keys=True) if src else ""
        if key not in explained:
            explained[key] = _cause(src, now, recipe, cluster, conc, current)
        what = explained[key]
        text = what if isinstance(what, str) else "; ".join(map(str, what))
        st.causes.setdefault(text, (what, []))[1].append(conc)
    swept = {c for s in sources for c in (s["recipe"]["doc"].get("concurrency") or [])}
    for conc in missing:
        (st.new if sources and conc not in swept else st.no_result).append(conc)
    return st


def check_staleness(root: Path, recipe: Recipe, stack_fingerprint: str) -> list[str]:
    """Why each of the recipe's checks would rerun: its evals (always targets of the summary) and
    its API smoke where one was measured. A check follows its stack's plan (the smoke point's) and
    its own settings, and nothing else."""
    settings = {f"eval-{b}": _eval_settings_digest(root, recipe.name, b, s) for b, s in recipe.evals.items()}
    wanted = [(f"eval-{b}", paths.eval_file(recipe.name, b), "eval.schema.yaml", "settings") for b in recipe.evals]
    smoke = root / paths.SMOKE.format(recipe=recipe.name)
    if smoke.exists():
        settings["smoke"] = digest((root / paths.SMOKE_REQUESTS).read_text())
        wanted.append(("smoke", str(smoke.relative_to(root)), "smoke.schema.yaml", "request_set"))
    out = []
    for name, file, schema, key in wanted:
        if not (root / file).exists():
            out.append(f"{name}: no result")
            continue
        doc, why = checked_json(root / file, schema)
        if doc is None:
            out.append(f"{name}: result unreadable ({why})")
        elif doc["identity"]["plan_fingerprint"] != stack_fingerprint:
            out.append(f"{name}: stale — its stack's plan changed (c{min(recipe.concurrency)}, the stack it runs on)")
        elif doc["identity"][key] != settings[name]:
            what = "the request set" if name == "smoke" else f"evals.{name[5:]}"
            more = "" if name == "smoke" else "its settings or its questions' copy; "
            out.append(f"{name}: stale — {what} changed ({more}only this check reruns)")
    return out


def _eval_settings_digest(root: Path, recipe: str, benchmark: str, settings: dict) -> str:
    """The digest the eval's result records when current: of its settings as the recipe says now, with
    the questions' copy (checks/evaldata) as the settings file last recorded it."""
    now = settings_doc(benchmark, settings)
    try:
        written = json.loads((root / paths.eval_settings_file(recipe, benchmark)).read_text())
    except (OSError, ValueError):
        written = None
    if isinstance(written, dict) and "data" in written:
        now["data"] = written["data"]
    return digest(canonical(now))


def _listing(folder: Path) -> set[str]:
    """The names in a recipe's results folder: one listing, not a stat per point (3 200 in a large sweep)."""
    try:
        return set(os.listdir(folder))
    except OSError:
        return set()


def _cause(src, now, recipe, cluster, conc, current) -> str | list[Change]:
    if src is None:
        return "the result records no source (measured before servesweep kept one): its plan differs"
    try:
        changes = used_changes(source_changes(src, now), recipe, cluster, conc, current)
    except (KeyError, TypeError, AttributeError):
        return "the result's recorded source is malformed: its plan differs"
    if not changes:
        return "same recipe and cluster facts: servesweep renders the plan differently now"
    return changes


def cause_lines(stalenesses: list[RecipeStaleness], limit: int | None = MAX_LINES) -> list[str]:
    lines = [line for s in stalenesses for line in s.lines(CUT if limit is not None else None)]
    if limit is not None and len(lines) > limit:
        more = len(lines) - limit
        lines = lines[:limit] + [f"… and {more} more line(s): `servesweep why` shows all"]
    return lines

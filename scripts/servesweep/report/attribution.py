"""Against a baseline: which recipe and cluster fields differ between the baseline's results and the
current ones, so a delta is attributed to a change, or to noise and environment."""

from __future__ import annotations

import json
from pathlib import Path

from tabulate import tabulate

from .sourcediff import cut, source_changes

HEADERS = ["recipe", "conc compared", "what differs (recipe terms)"]


def _read(path) -> dict | None:
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) and isinstance(doc.get("identity"), dict) else None


def attribution_rows(current: dict[tuple[str, int], str], baseline: dict[tuple[str, int], str]) -> list[list[str]]:
    """``current``/``baseline``: (recipe, conc) -> result path. One row per recipe in both, from its
    lowest common point."""
    rows = []
    for recipe in sorted({r for r, _ in current} & {r for r, _ in baseline}):
        common = sorted(c for r, c in current if r == recipe and (r, c) in baseline)
        if not common:
            continue
        conc = common[0]
        new, old = _read(current[(recipe, conc)]), _read(baseline[(recipe, conc)])
        rows.append([recipe, f"c{conc}", _difference(old, new)])
    return rows


def _difference(old: dict | None, new: dict | None) -> str:
    if old is None or new is None:
        return "a result is unreadable: not compared"
    same_plan = old["identity"].get("plan_fingerprint") == new["identity"].get("plan_fingerprint")
    if not (isinstance(old.get("source"), dict) and isinstance(new.get("source"), dict)):
        return "same plan: noise or environment" if same_plan else "plans differ (a result records no source)"
    changes = source_changes(old["source"], new["source"])
    if same_plan:
        return "same config: noise or environment"
    if not changes:
        return "same recipe and cluster facts; servesweep rendered the plan differently"
    return cut(changes, "servesweep diff BASELINE_RESULT RESULT", 5)


def attribution_section(current: dict, baseline: dict) -> list[str]:
    rows = attribution_rows(current, baseline)
    if not rows:
        return []
    table = tabulate(rows, HEADERS, tablefmt="github", disable_numparse=True)
    return ["", "### What differs from the baseline", "", table]

"""The summary's links to engine profiles (run/profile): a profile is a target you ask for, never a
summary input, so the summary links those on disk for its recipes, each with its index's figures."""

from __future__ import annotations

import json
import os
from pathlib import Path

from ..contract import paths


def profile_rows(recipes: list[str], root: Path) -> list[tuple[str, Path, dict]]:
    """(recipe, index file, index) of each readable profile of these recipes, in name order."""
    out = []
    for recipe in sorted(set(recipes)):
        pattern = paths.PROFILE.format(recipe=recipe, conc="*") + f"/{paths.PROFILE_INDEX}"
        for index in sorted(root.resolve().glob(pattern)):
            try:
                doc = json.loads(index.read_text())
            except (OSError, ValueError):
                continue
            if isinstance(doc, dict) and isinstance(doc.get("processes"), list):
                out.append((recipe, index, doc))
    return out


def profiles_section(recipes: list[str], root: Path, md_dir: Path) -> list[str]:
    """The summary's Profiles section (none when no profile was taken)."""
    rows = profile_rows(recipes, root)
    if not rows:
        return []
    lines = ["", "## Engine profiles (own load, never a point's figures)", ""]
    lines += ["| recipe | profile | kind | window | processes | files |", "|---|---|---|---|---|---|"]
    for recipe, index, doc in rows:
        prof, procs = doc.get("profile") or {}, doc["processes"]
        window = f"{prof.get('steps')} steps" if prof.get("steps") else f"{prof.get('window_s')} s"
        link = os.path.relpath(index, md_dir.resolve())  # the summary links relatively, as its plots
        files = sum(len(p.get("files") or []) for p in procs)
        names = ", ".join(f"{p.get('process')} ({p.get('role')})" for p in procs)
        lines.append(f"| {recipe} | [{index.parent.name}]({link}) | {prof.get('kind')} | "
                     f"{window} at c{prof.get('concurrency')} | {names} | {files} |")  # fmt: skip
    return lines

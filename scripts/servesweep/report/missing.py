"""The summary's missing points: each selected point without a result, and why (its last failure,
the earlier attempts kept beside it and any measured result that could not be saved)."""

from __future__ import annotations

import json
from pathlib import Path

from ..contract import paths


def missing_points(selection: dict, present: set[str], root: Path) -> list[list[str]]:
    out = []
    for p in selection["points"]:
        if p["result"] in present:
            continue
        reason = "not run yet"
        fail = root / p["log_dir"] / paths.FAILURE_FILE
        if fail.exists():
            try:
                doc = json.loads(fail.read_text())
                reason = f"last run failed {doc['time']}: {doc['reason'].splitlines()[0]}"
            except (ValueError, KeyError, IndexError):
                reason = "last run failed (unreadable failure record)"
        out.append([p["recipe"], str(p["concurrency"]), reason + _attempts_note(root, p["log_dir"]), p["log_dir"]])
    return out


def _attempts_note(root: Path, log_dir: str) -> str:
    """Earlier attempts kept beside the last (run/attempts.keep_earlier_attempt), naming every measured
    result that could not be saved (result.unsaved.json)."""
    last = root / log_dir
    earlier = sorted(last.parent.glob(last.name + ".attempt-*"), key=lambda d: int(d.name.rpartition("-")[2] or 0))
    unsaved = [str(d.relative_to(root) / paths.UNSAVED_RESULT) for d in [last, *earlier]]
    unsaved = [u for u in unsaved if (root / u).is_file()]
    note = f" ({len(earlier)} earlier attempt(s) kept: {earlier[-1].relative_to(root)} …)" if earlier else ""
    return note + (f"; measured but unsaved: {', '.join(unsaved)}" if unsaved else "")

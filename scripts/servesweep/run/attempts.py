"""A point's attempts: an earlier attempt's files kept aside (never deleted by the next), and the one
writer of the failure record that says why an attempt wrote no result."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from ..contract import paths
from ..fileio.errors import plain_text
from .driver_io import now


def keep_earlier_attempt(run_dir: Path) -> None:
    """A new attempt never deletes an earlier one's artifacts (an unsaved result, aiperf's export,
    failure.json): its directory moves aside to ``c<conc>.attempt-<n>``."""
    if not run_dir.exists():
        return
    if not any(run_dir.iterdir()):
        run_dir.rmdir()
        return
    n = 1
    while (aside := run_dir.with_name(f"{run_dir.name}.attempt-{n}")).exists():
        n += 1
    run_dir.rename(aside)
    repoint_failure(aside / paths.FAILURE_FILE, run_dir, aside)


def repoint_failure(record: Path, was: Path, now_at: Path) -> None:
    """A kept attempt's failure record names its files where they are now (``c4.attempt-1/...``),
    not where they were written (``c4/...``, which the next attempt reuses)."""
    try:
        doc = json.loads(record.read_text())
    except (OSError, ValueError):
        return
    if not isinstance(doc, dict):
        return
    for form_was, form_now in ((str(was), str(now_at)), (os.path.relpath(was), os.path.relpath(now_at))):
        old = re.compile(re.escape(form_was) + r"(?![\w.-])")  # c4 and c4/..., never c4.attempt-2
        for key in ("reason", "logs"):
            if isinstance(doc.get(key), str):
                doc[key] = old.sub(form_now, doc[key])
    doc["moved_from"] = str(was)
    record.write_text(json.dumps(doc, indent=1) + "\n")


def record_failure(run_dir: Path, reason: str, **more) -> None:
    """The one writer of a point's (a check's) failure.json: why its attempt wrote no result (atomic:
    the summary may read it while a held stack's point adds its reason); ``more``: e.g. the signal."""
    doc = {"time": now(), "reason": plain_text(reason), "logs": str(run_dir), **more}
    path = run_dir / paths.FAILURE_FILE
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc, indent=1) + "\n")
    tmp.replace(path)

"""Atomic file writes: readers (Snakemake, the summary, a rerun) never see half a file."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

_UMASK = os.umask(0o022)
os.umask(_UMASK)  # read once; mkstemp makes 0600 files, a plain open() would honour the umask


def private_outputs() -> None:
    """From here on everything this process (and what it starts) writes is owner-only: plans,
    results, logs, caches. On a shared cluster filesystem no one else reads or alters a measurement."""
    global _UMASK
    os.umask(0o077)
    _UMASK = 0o077


def write_if_changed(path: Path, text: str) -> bool:
    """Atomic write (temp + rename) only when content differs; True if written."""
    path, data = Path(path), text.encode()
    try:
        with open(path, "rb") as f:  # bytes: half the cost of read_text, which a dry run pays per plan
            if f.read() == data:
                return False
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o666 & ~_UMASK)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return True


def read_json_object(path: Path) -> dict:
    """A file we wrote, read back: anything but a JSON object counts as absent."""
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}

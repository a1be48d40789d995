"""Atomic file writes: readers (Snakemake, the summary, a rerun) never see half a file."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

PRIVATE_FILE = 0o600  # what write_if_changed gives every file, whatever the process's umask


def private_outputs() -> None:
    """For a process's entry point only (the Snakefile, a driver's main), never on import or load:
    from here on everything this process (and what it starts) writes is owner-only: plans, results,
    logs, caches. On a shared cluster filesystem no one else reads or alters a measurement."""
    os.umask(0o077)


def private_dirs(folder: Path) -> None:
    """``folder`` and every missing folder above it, each made 0700 whatever the umask (``mkdir``'s
    ``parents=True`` gives the folders above the umask's mode)."""
    missing = []
    while not folder.exists():
        missing.append(folder)
        folder = folder.parent
    for d in reversed(missing):
        d.mkdir(mode=0o700, exist_ok=True)


def write_if_changed(path: Path, text: str) -> bool:
    """Atomic, owner-only write (temp + rename) only when content differs; True if written."""
    path, data = Path(path), text.encode()
    try:
        with open(path, "rb") as f:  # bytes: half the cost of read_text, which a dry run pays per plan
            if f.read() == data:
                return False
    except FileNotFoundError:
        pass
    except IsADirectoryError:
        if ".plans" not in path.parts:  # a folder where a result goes is the user's: the write fails, said
            raise
        # the workflow's own files: a leftover folder (of a recipe once named like this file), kept aside
        path.rename(path.with_name(f".{path.name}.leftover-{os.getpid()}"))
    private_dirs(path.parent)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, PRIVATE_FILE)
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

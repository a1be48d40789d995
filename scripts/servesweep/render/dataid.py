"""What data a point reads, as part of its identity: the trace file or folder (or eval set, or
public corpus) aiperf replays and the local model folder the engines load.

Each becomes a small document in the plan (``data``: the client's, ``model_data``: the servers'),
so a changed trace changes the plan text, and Snakemake's plan-file staleness reruns its points;
``servesweep why`` and ``diff`` name the file. A file is known by its content (sha256) up to
:data:`DIGEST_LIMIT`, a larger one by its size and mtime; a folder by the sorted list of its files'
identities. Digests are kept keyed by (path, size, mtime, ctime, inode) in the render memo, so a dry
run reads a file again only after it changed. Data this host cannot see (a cluster path) stands as
the recipe's declared ``version``, or as unreadable here: the job checks it when it runs.
"""

from __future__ import annotations

import hashlib
import os
import stat
import time

from ..contract.plan import host_side

DIGEST_LIMIT = 64 * 2**20  # bytes: a larger file is known by (size, mtime), never read at dry-run time
SETTLED_NS = 1_000_000_000  # as the render memo's: a file changed this recently may change again unseen
FOLDER_FILES = 10_000  # a folder with more files is known by its count, total size and latest mtime

_digests: dict[str, str] = {}  # "path\0size\0mtime_ns\0inode" -> sha256, this process and the memo's
_seen: dict[tuple, dict] = {}  # (path, declared) -> identity, once per process (data is fixed during one load)
_used: set[str] = set()  # the digests this load looked up: the memo keeps only those
_kept: set[str] = set()  # the digests the memo holds
_added = False  # new digests since the memo was loaded


def remember(kept: dict) -> None:
    """Digests the render memo kept from earlier runs."""
    _digests.update({k: v for k, v in kept.items() if isinstance(k, str) and isinstance(v, str)})
    _kept.clear()
    _kept.update(kept)


def known() -> tuple[dict, bool]:
    """(the digests this load used, whether the memo should be written for them)."""
    return {k: _digests[k] for k in sorted(_used)}, _added or not _used <= _kept


def look_again() -> None:
    """A new load (the render memo is read): data may have changed since the last one looked."""
    global _added
    _seen.clear()
    _used.clear()
    _added = False


def _file_digest(path: str, st: os.stat_result) -> str:
    """sha256 of the file; kept under its stat once the file has settled (a write in the same clock
    tick as the read could leave size, mtime and ctime unchanged)."""
    global _added
    key = f"{os.path.abspath(path)}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_ctime_ns}\0{st.st_ino}"
    if key in _digests:
        _used.add(key)
        return _digests[key]
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    if time.time_ns() - st.st_ctime_ns > SETTLED_NS:
        _digests[key], _added = h.hexdigest(), True
        _used.add(key)
    return h.hexdigest()


def _file_id(path: str, st: os.stat_result) -> str:
    if st.st_size > DIGEST_LIMIT:
        return f"size={st.st_size},mtime_ns={st.st_mtime_ns}"
    return "sha256:" + _file_digest(path, st)


def _folder_id(path: str) -> dict:
    entries = []
    for top, dirs, files in os.walk(path):
        dirs.sort()
        for name in sorted(files):
            full = os.path.join(top, name)
            st = os.stat(full)
            if stat.S_ISREG(st.st_mode):
                entries.append((os.path.relpath(full, path), st, full))
        if len(entries) > FOLDER_FILES:
            break
    size = sum(st.st_size for _, st, _ in entries)
    if len(entries) > FOLDER_FILES:
        latest = max(st.st_mtime_ns for _, st, _ in entries)
        return {"kind": "folder", "files": len(entries), "size": size, "id": f"latest_mtime_ns={latest}"}
    h = hashlib.sha256()
    for rel, st, full in entries:
        h.update(f"{rel}\0{_file_id(full, st)}\n".encode())
    return {"kind": "folder", "files": len(entries), "size": size, "id": "sha256:" + h.hexdigest()}


def identity(path: str, declared: str | None = None) -> dict:
    """One input by what it holds: ``{path, version, kind, ...}``; ``kind`` is ``file``, ``folder``
    or ``unreadable`` (not visible from this host: the declared version stands in)."""
    key = (path, declared)
    if key not in _seen:
        out = {"path": path, "version": declared}
        try:
            st = os.stat(path)
            if stat.S_ISDIR(st.st_mode):
                out |= _folder_id(path)
            else:
                out |= {"kind": "file", "size": st.st_size, "id": _file_id(path, st)}
        except OSError:  # why is the pre-flight's to say (and the job's, where the data is)
            out |= {"kind": "unreadable"}
        _seen[key] = out
    return _seen[key]


def dataset_identity(dataset: dict) -> dict | None:
    """The benchmark's dataset (the plan's ``benchmark.dataset``, host side): None when synthetic."""
    kind = dataset.get("kind")
    if kind == "public":  # a corpus aiperf pins by name: the name is its version
        return {"path": None, "version": dataset["name"], "kind": "public", "hf_repo": dataset.get("hf_repo")}
    if "path" not in dataset:
        return None
    return identity(dataset["path"], dataset.get("version"))


def model_identity(model: dict, container_mounts, in_container: bool) -> dict:
    """The model folder the engines load, where this host sees it (through the container's mounts)."""
    path = model["path"]
    if in_container:
        path = host_side(path, container_mounts) or path
    ident = identity(path, model.get("version"))
    return ident if ident["path"] == model["path"] else {**ident, "as_seen_by_engines": model["path"]}


def saved() -> None:
    """The render memo holds the digests :func:`known` gave."""
    global _added
    _added = False
    _kept.clear()
    _kept.update(_used)

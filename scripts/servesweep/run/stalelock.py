"""Snakemake's lock after a snakemake that was killed: cleared when its owner is provably gone,
else the exact command to run.

Snakemake writes ``.snakemake/locks/<n>.{input,output}.lock`` and removes them when it ends; a
SIGKILL (or a power loss) leaves them, and every later run on the same outputs stops with a
``LockException``. The lock files do not say who wrote them, so every main snakemake of this
workflow leaves its own owner record (host, pid, start time) beside them, removed when it exits.
At the next run's parse (before Snakemake checks its lock), a lock whose every owner record names a
process of this host that is gone, with no other snakemake running in the directory here, is
removed, saying so. Anything less certain (a record from another host, a lock without a record)
stays, and the exact command is printed.
"""

from __future__ import annotations

import atexit
import json
import os
import socket
import sys
from pathlib import Path

import psutil

from ..contract import paths

LOCKS = paths.SNAKEMAKE_LOCKS
OWNERS = paths.RUN_OWNERS


def settle(root: Path, dry_run: bool, argv: list[str] | None = None, say=None) -> None:
    """In the main snakemake at parse time (a dry run takes no lock and changes nothing)."""
    say = say or (lambda msg: print(msg, file=sys.stderr))
    argv = sys.argv if argv is None else argv
    root = Path(root).resolve()
    if dry_run or "--unlock" in argv:
        return
    locks = sorted((root / LOCKS).glob("*.lock"))
    if not locks:
        _forget_the_dead(root)
    else:
        gone, why = owners_gone(root)
        if gone:
            for f in [*locks, *gone]:
                f.unlink(missing_ok=True)
            say(f"servesweep: removed Snakemake's lock in {root / LOCKS}: {why}")
        else:
            say(
                f"servesweep: Snakemake's lock in {root / LOCKS} stays ({why}). If no snakemake runs in this "
                f"directory on any host (one killed leaves its lock), remove it with: cd {root} && snakemake --unlock"
            )
    _record_self(root)


def owners_gone(root: Path) -> tuple[list[Path], str]:
    """(the owner records to remove, why) when every owner is provably gone; ([], why not) otherwise."""
    host, records, gone = socket.gethostname(), sorted((root / OWNERS).glob("*.json")), []
    if not records:
        return [], "no owner record: it was written by a snakemake this check cannot see"
    for f in records:
        try:
            doc = json.loads(f.read_text())
            pid, started, where = int(doc["pid"]), float(doc["create_time"]), str(doc["host"])
        except (OSError, ValueError, KeyError, TypeError):
            return [], f"an unreadable owner record {f}"
        if where != host:
            return [], f"a snakemake on {where} (pid {pid}) may hold it"
        if _same_process(pid, started):
            return [], f"snakemake pid {pid} is running"
        gone.append(f)
    live = _snakemakes_in(root)
    if live:
        return [], f"snakemake pid {live[0]} runs in this directory"
    pids = ", ".join(f.stem.rpartition("-")[2] for f in gone)
    return gone, f"the snakemake that held it (pid {pids} on this host) is gone: it was killed"


def _same_process(pid: int, started: float) -> bool:
    try:
        return abs(psutil.Process(pid).create_time() - started) < 1.0
    except psutil.Error:
        return False


def _snakemakes_in(root: Path) -> list[int]:
    """Other snakemake processes on this host working in ``root`` (this one and its ancestors aside)."""
    me = {os.getpid(), *(p.pid for p in psutil.Process().parents())}
    out = []
    for p in psutil.process_iter(["pid", "cmdline", "cwd"]):
        try:
            cmd = p.info["cmdline"] or []
            if p.pid in me or not any(Path(part).name == "snakemake" for part in cmd[:3]):
                continue
            if p.info["cwd"] and Path(p.info["cwd"]).resolve() == root:
                out.append(p.pid)
        except (psutil.Error, OSError):
            continue
    return out


def _forget_the_dead(root: Path) -> None:
    """Records of this host's snakemakes that are gone and left no lock (killed before locking)."""
    host = socket.gethostname()
    for f in (root / OWNERS).glob(f"{host}-*.json"):
        try:
            doc = json.loads(f.read_text())
            if not _same_process(int(doc["pid"]), float(doc["create_time"])):
                f.unlink()
        except (OSError, ValueError, KeyError, TypeError):
            continue


def _record_self(root: Path) -> None:
    """This snakemake's owner record, removed when it exits (a SIGKILL leaves it: the proof above)."""
    me = psutil.Process()
    record = root / OWNERS / f"{socket.gethostname()}-{me.pid}.json"
    try:
        record.parent.mkdir(parents=True, exist_ok=True)
        doc = {"host": socket.gethostname(), "pid": me.pid, "create_time": me.create_time()}
        record.write_text(json.dumps(doc) + "\n")
    except OSError:
        return  # no record: a later lock is then only explained, never removed
    atexit.register(record.unlink, missing_ok=True)

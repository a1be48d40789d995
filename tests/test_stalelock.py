"""Snakemake's lock after a killed snakemake (run/stalelock): removed when its owner is provably gone,
else left with the exact command to run. Unit level, with real processes for live and dead owners."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from servesweep.run import stalelock


def _locked(root: Path) -> list[Path]:
    locks = root / stalelock.LOCKS
    locks.mkdir(parents=True)
    for kind in ("input", "output"):
        (locks / f"0.{kind}.lock").write_text(f"{root}/results/r/c2.json\n")
    return sorted(locks.iterdir())


def _owner(root: Path, pid: int, create_time: float, host: str | None = None) -> Path:
    host = host or socket.gethostname()
    f = root / stalelock.OWNERS / f"{host}-{pid}.json"
    f.parent.mkdir(parents=True, exist_ok=True)
    f.write_text(json.dumps({"host": host, "pid": pid, "create_time": create_time}))
    return f


@pytest.fixture
def dead_pid():
    """(pid, start time) of a snakemake that is gone."""
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    started = psutil.Process(p.pid).create_time()
    p.wait(timeout=30)
    return p.pid, started


def _settle(root: Path, dry_run: bool = False) -> str:
    said = []
    stalelock.settle(root, dry_run, argv=["snakemake"], say=said.append)
    return "\n".join(said)


def test_a_lock_whose_owner_was_killed_is_removed_saying_so(tmp_path, dead_pid):
    locks = _locked(tmp_path)
    record = _owner(tmp_path, *dead_pid)
    said = _settle(tmp_path)
    assert f"removed Snakemake's lock in {tmp_path / stalelock.LOCKS}" in said
    assert f"(pid {dead_pid[0]} on this host) is gone" in said
    assert not any(f.exists() for f in locks) and not record.exists()
    assert (tmp_path / stalelock.OWNERS / f"{socket.gethostname()}-{os.getpid()}.json").exists()  # ours


@pytest.mark.parametrize(
    "owner, why",
    [
        ("live", "snakemake pid {pid} is running"),
        ("none", "no owner record"),
        ("elsewhere", "a snakemake on login2 (pid {pid}) may hold it"),
    ],
)
def test_a_lock_that_may_be_held_stays_with_the_exact_command(tmp_path, dead_pid, owner, why):
    locks = _locked(tmp_path)
    me = psutil.Process()
    pid = {"live": me.pid, "none": 0, "elsewhere": dead_pid[0]}[owner]
    if owner == "live":
        _owner(tmp_path, me.pid, me.create_time())
    if owner == "elsewhere":
        _owner(tmp_path, pid, dead_pid[1], host="login2")
    said = _settle(tmp_path)
    assert why.format(pid=pid) in said, said
    assert f"remove it with: cd {tmp_path} && snakemake --unlock" in said
    assert all(f.exists() for f in locks)


def test_a_dry_run_touches_nothing(tmp_path, dead_pid):
    locks = _locked(tmp_path)
    record = _owner(tmp_path, *dead_pid)
    assert _settle(tmp_path, dry_run=True) == ""
    assert all(f.exists() for f in locks) and record.exists()
    assert len(list((tmp_path / stalelock.OWNERS).iterdir())) == 1

"""Shared by the bench scripts: machine facts, medians, a temp copy of the workflow."""

from __future__ import annotations

import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from servesweep.tools import workcopy

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
LOCAL_RECIPES = ["local-agg-2x-mocker", "local-disagg-1p1d-mocker"]
snakemake = workcopy.snakemake


def copy_workflow(dest: Path, recipes: list[str] | None = None) -> Path:
    return workcopy.copy_workflow(ROOT, dest, recipes)


def machine() -> str:
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    cpu = f"{platform.machine()} {os.cpu_count()} cores {mem:.0f} GiB"
    return f"{platform.node()} {cpu}, Python {platform.python_version()}"


def header(title: str, reproduce: str) -> None:
    print(f"# {title}\nmachine: {machine()}\nreproduce: {reproduce}\n")


def stats(xs: list[float]) -> str:
    return f"median {statistics.median(xs):.3f}  min {min(xs):.3f}  max {max(xs):.3f}"


def timed_child(
    argv: list[str], cwd: Path, env: dict | None = None
) -> tuple[float, float, subprocess.CompletedProcess]:
    """(wall s, peak RSS MiB of the child tree's largest process, result), in a fresh helper process
    so RUSAGE_CHILDREN holds only this command."""
    code = (
        "import resource,subprocess,sys,time,json;t=time.perf_counter();"
        "r=subprocess.run(sys.argv[1:],capture_output=True,text=True);"
        "w=time.perf_counter()-t;m=resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss/1024;"
        "print(json.dumps([w,m,r.returncode]));sys.stderr.write(r.stderr[-2000:] if r.returncode else '')"
    )
    r = subprocess.run(
        [sys.executable, "-c", code, *argv],
        cwd=cwd,
        capture_output=True,
        text=True,
        env=dict(os.environ, **(env or {})),
    )
    import json

    wall, rss, rc = json.loads(r.stdout.strip().splitlines()[-1])
    if rc:
        raise SystemExit(f"{argv} failed ({rc}): {r.stderr}")
    return wall, rss, r


__all__ = [
    "ROOT",
    "BIN",
    "LOCAL_RECIPES",
    "copy_workflow",
    "snakemake",
    "header",
    "stats",
    "timed_child",
    "shutil",
    "time",
    "resource",
]

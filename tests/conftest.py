"""Shared helpers: a temp copy of the workflow, and running snakemake / the CLI in it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
LOCAL_RECIPES = ["local-agg-2x-mocker", "local-disagg-1p1d-mocker"]


def copy_workflow(dest: Path, recipes: list[str] | None = None) -> Path:
    """Snakefile, rules, schemas, profiles, scripts and (some) recipes in dest."""
    dest.mkdir(parents=True, exist_ok=True)
    for name in ("Snakefile", "rules", "schemas", "profiles", "scripts"):
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, dest / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(src, dest / name)
    (dest / "recipes").mkdir()
    shutil.copytree(ROOT / "recipes" / "traces", dest / "recipes" / "traces")
    for f in sorted((ROOT / "recipes").glob("*.yaml")):
        if recipes is None or f.stem in recipes:
            shutil.copy2(f, dest / "recipes" / f.name)
    for link in (".venvs", ".cache"):
        if (ROOT / link).exists():
            (dest / link).symlink_to(ROOT / link)
    return dest


def snakemake(wf: Path, *args: str, timeout: float = 600, env: dict | None = None) -> subprocess.CompletedProcess:
    cmd = [str(BIN / "snakemake"), "--profile", "profiles/local", *args]
    full_env = dict(os.environ, **(env or {}))
    full_env["PATH"] = f"{BIN}{os.pathsep}{full_env.get('PATH', '')}"
    return subprocess.run(cmd, cwd=wf, capture_output=True, text=True, timeout=timeout, env=full_env)


def servesweep(*args: str, cwd: Path = ROOT, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "servesweep", *args], cwd=cwd, capture_output=True, text=True, timeout=timeout
    )


@pytest.fixture
def wf(tmp_path):
    return copy_workflow(tmp_path / "wf", LOCAL_RECIPES)


# -- the reliability report: tests record (category, case, passed); printed at the end --
RELIABILITY: dict[str, list[tuple[str, bool]]] = {}


@pytest.fixture
def reliability(request):
    """record(category, case) marks a case tried; it passes if the test passes."""
    entries = []

    def record(category: str, case: str):
        entries.append((category, case))

    yield record
    rep = getattr(request.node, "rep_call", None)
    ok = bool(rep and rep.passed)
    for category, case in entries:
        RELIABILITY.setdefault(category, []).append((case, ok))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if rep.when == "call":
        item.rep_call = rep


def pytest_terminal_summary(terminalreporter):
    if not RELIABILITY:
        return
    tr = terminalreporter
    tr.section("reliability")
    tr.write_line(f"{'category':<28} {'tried':>5} {'passed':>6}")
    for category, cases in sorted(RELIABILITY.items()):
        tr.write_line(f"{category:<28} {len(cases):>5} {sum(ok for _, ok in cases):>6}")

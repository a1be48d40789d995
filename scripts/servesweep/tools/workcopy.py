"""A temp copy of a workflow checkout, and snakemake run in it: for tests and benches."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

BIN = Path(sys.executable).parent


def copy_workflow(root: Path, dest: Path, recipes: list[str] | None = None) -> Path:
    """Snakefile, rules, schemas, profiles, scripts and (some) recipes of ``root`` in ``dest``."""
    dest.mkdir(parents=True, exist_ok=True)
    for name in ("Snakefile", "rules", "schemas", "profiles", "scripts", "report"):
        src = root / name
        if src.is_dir():
            shutil.copytree(src, dest / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(src, dest / name)
    (dest / "recipes").mkdir()
    shutil.copytree(root / "recipes" / "traces", dest / "recipes" / "traces")
    for f in sorted((root / "recipes").glob("*.yaml")):
        if recipes is None or f.stem in recipes:
            shutil.copy2(f, dest / "recipes" / f.name)
    for link in (".venvs", ".cache"):
        if (root / link).exists():
            (dest / link).symlink_to(root / link)
    return dest


def snakemake(
    wf: Path, *args: str, profile: str = "profiles/local", timeout: float = 600, env: dict | None = None
) -> subprocess.CompletedProcess:
    cmd = [str(BIN / "snakemake"), "--profile", profile, *args]
    full_env = dict(os.environ, **(env or {}))
    full_env["PATH"] = f"{BIN}{os.pathsep}{full_env.get('PATH', '')}"
    return subprocess.run(cmd, cwd=wf, capture_output=True, text=True, timeout=timeout, env=full_env)

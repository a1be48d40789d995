"""Style gates: ruff, snakefmt and snakemake --lint are clean."""

from __future__ import annotations

import os
import subprocess

from helpers import BIN, ROOT


def run(*argv: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ['PATH']}")
    return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, env=env, timeout=300)


def test_ruff_clean():
    r = run(str(BIN / "ruff"), "check", "scripts", "tests", "bench")
    assert r.returncode == 0, r.stdout
    r = run(str(BIN / "ruff"), "format", "--check", "scripts", "tests", "bench")
    assert r.returncode == 0, r.stdout


def test_snakefmt_clean():
    r = run(str(BIN / "snakefmt"), "--check", "Snakefile", *sorted(str(p) for p in (ROOT / "rules").glob("*.smk")))
    assert r.returncode == 0, r.stderr


def test_snakemake_lint_clean():
    r = run(str(BIN / "snakemake"), "--lint", "--config", "cluster=local")
    assert r.returncode == 0, r.stdout + r.stderr

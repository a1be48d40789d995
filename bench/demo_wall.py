"""Whole local demo: wall time of the README's sweep on a warm machine (venvs built), from scratch."""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
from pathlib import Path

from common import BIN, header
from conftest import LOCAL_RECIPES, copy_workflow


def main() -> None:
    header("whole local demo", f"{BIN}/python bench/demo_wall.py")
    with tempfile.TemporaryDirectory() as tmp:
        wf = copy_workflow(Path(tmp) / "wf", LOCAL_RECIPES)
        env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ['PATH']}")
        t = time.perf_counter()
        r = subprocess.run(
            [str(BIN / "snakemake"), "--profile", "profiles/local", "results/summary.md"],
            cwd=wf,
            capture_output=True,
            text=True,
            env=env,
        )
        wall = time.perf_counter() - t
        if r.returncode:
            raise SystemExit(r.stderr[-3000:])
        points = len(list(wf.glob("results/*/c*.json")))
        print(f"snakemake --profile local results/summary.md: {wall:.1f} s for {points} points")


if __name__ == "__main__":
    main()

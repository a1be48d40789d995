"""Whole local demo: wall time of `make demo`'s sweep (the recipes `python -m servesweep demo` runs)
on a warm machine (venvs built), each run from a fresh copy of the workflow (no results, no plans)."""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from servesweep.contract.paths import RESULTS, point_files
from servesweep.tools.demo import DEMO_RECIPES

from common import BIN, copy_workflow, header, snakemake, stats


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--reps", type=int, default=1)
    a = ap.parse_args()
    header("whole local demo", f"{BIN}/python bench/demo_wall.py --reps {a.reps}")
    walls, points = [], 0
    for i in range(a.reps):
        with tempfile.TemporaryDirectory() as tmp:
            wf = copy_workflow(Path(tmp) / f"wf{i}", list(DEMO_RECIPES))
            t = time.perf_counter()
            r = snakemake(wf, "results/summary.md", timeout=1800)
            walls.append(time.perf_counter() - t)
            if r.returncode:
                raise SystemExit(r.stderr[-3000:])
            points = len(point_files(wf / RESULTS, every_recipe=True))  # not capacity.json
            print(f"run {i + 1}: {walls[-1]:.1f} s", flush=True)
    print(f"snakemake --profile local results/summary.md ({points} points): {stats(walls)} s")


if __name__ == "__main__":
    main()

"""One engine start per curve: wall time and engine starts of a 4-point local curve, on one warm
stack vs one stack per point (--config stack_reuse=0), measured in one run of this script.
``--recipe local-agg-2x-vllm-cpu`` measures it with real vLLM replicas (CPU build)."""

from __future__ import annotations

import argparse
import re
import tempfile
import time
from pathlib import Path

import yaml

from common import BIN, copy_workflow, header, snakemake

CONCURRENCIES = [2, 4, 8, 16]


def sweep(tmp: Path, recipe: str, label: str, duration: int, *extra: str) -> tuple[float, int, int]:
    """(wall s, stacks started, points written) of the 4-point curve from a fresh workflow copy."""
    wf = copy_workflow(tmp / label, [recipe])
    f = wf / "recipes" / f"{recipe}.yaml"
    doc = yaml.safe_load(f.read_text())
    doc["scenario"]["duration_s"] = duration
    doc["concurrency"] = CONCURRENCIES
    f.write_text(yaml.safe_dump(doc, sort_keys=False))
    t = time.perf_counter()
    r = snakemake(wf, "results/summary.md", *extra, timeout=1800)
    wall = time.perf_counter() - t
    if r.returncode:
        raise SystemExit((r.stdout + r.stderr)[-3000:])
    logs = [*wf.glob("logs/stacks/*/*/keeper-driver.log"), *wf.glob(f"logs/{recipe}/c*/driver.log")]
    starts = sum(len(re.findall(r"\] starting \d+ processes", p.read_text())) for p in logs)
    return wall, starts, len(list(wf.glob(f"results/{recipe}/c*.json")))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--duration", type=int, default=10, help="benchmark seconds per point")
    ap.add_argument("--recipe", default="local-agg-2x-mocker")
    a = ap.parse_args()
    cmd = f"{BIN}/python bench/warm_stack.py --duration {a.duration} --recipe {a.recipe}"
    header(f"warm stack vs one stack per point ({a.recipe}, c{CONCURRENCIES})", cmd)
    with tempfile.TemporaryDirectory() as tmp:
        rows = [
            ("one warm stack per curve", *sweep(Path(tmp), a.recipe, "warm", a.duration)),
            ("one stack per point", *sweep(Path(tmp), a.recipe, "cold", a.duration, "--config", "stack_reuse=0")),
        ]
    for label, wall, starts, points in rows:
        print(f"{label:<26} {points} points  engine starts {starts}  wall {wall:.1f} s")
    print(f"saved: {rows[1][1] - rows[0][1]:.1f} s of wall time, {rows[1][2] - rows[0][2]} engine starts")


if __name__ == "__main__":
    main()

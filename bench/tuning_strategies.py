"""Grid against successive halving on a local space with a known answer: the mocker's sequence slots
per replica x its speed-up ratio at c8 (the fastest engine with enough slots for every user holds the
SLO with the most throughput). Both strategies run for real in two workflow copies (halving in its two
rounds); prints each one's GPU-hours (from the results: GPUs x (benchmark + the startup of the stack
the point started)), its verdict line, and halving's share of the grid's GPU-hours."""

from __future__ import annotations

import argparse
import json
import re
import tempfile
import time
from pathlib import Path

import yaml

from common import copy_workflow, header, snakemake

RECIPE = "local-tune-mocker"


def _write(wf: Path, strategy: str, duration: float) -> None:
    f = wf / "recipes" / f"{RECIPE}.yaml"
    doc = yaml.safe_load(f.read_text())
    doc["scenario"]["duration_s"] = duration
    doc["sweep"] = {
        "axes": {
            "seqs": {"field": "engine.args[--max-num-seqs]", "values": [1, 2, 4]},
            "speed": {"field": "engine.args[--speedup-ratio]", "values": [0.5, 1, 2]},
        },
    }
    if strategy == "halving":
        doc["sweep"] |= {"strategy": "halving", "halving": {"target": 8, "keep": 0.2, "screen_share": 0.1}}
    f.write_text(yaml.safe_dump(doc, sort_keys=False))


def gpu_hours(wf: Path) -> tuple[float, int]:
    """(GPU-hours of every result of the sweep, its number of points)."""
    total, n = 0.0, 0
    for p in wf.glob(f"results/{RECIPE}.*/c*.json"):
        doc = json.loads(p.read_text())
        stack = doc["identity"]["stack"]
        start = stack["startup_s"] if stack["position"] == 1 else 0.0
        total += doc["identity"]["topology"]["gpus"] * (doc["timings_s"]["bench"] + start) / 3600
        n += 1
    return total, n


def verdict(wf: Path) -> str:
    text = (wf / "results/summary.md").read_text()
    m = re.search(r"\*\*(Best[^*]*|Tied[^*]*)\*\*", text.split(f"## Tuning `{RECIPE}`", 1)[1])
    return m.group(1) if m else "(no verdict)"


def run(wf: Path, rounds: int) -> float:
    t = time.monotonic()
    for _ in range(rounds):
        r = snakemake(wf, "results/summary.md", timeout=1800)
        if r.returncode:
            raise SystemExit(r.stderr[-3000:])
    return time.monotonic() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--duration", type=float, default=30.0, help="the full benchmark (s); a screen is 1/10")
    a = ap.parse_args()
    reproduce = f"python bench/tuning_strategies.py --duration {a.duration:g}"
    header("tuning strategies: grid vs successive halving", reproduce)
    tmp = Path(tempfile.mkdtemp())
    out = {}
    for strategy, rounds in (("grid", 1), ("halving", 2)):
        wf = copy_workflow(tmp / strategy, [RECIPE])
        _write(wf, strategy, a.duration)
        wall = run(wf, rounds)
        hours, points = gpu_hours(wf)
        out[strategy] = hours
        print(f"{strategy:8s} {points:2d} points, {hours:.4f} GPU-h, wall {wall:.0f} s: {verdict(wf)}")
    print(f"halving / grid GPU-hours: {out['halving'] / out['grid']:.0%} (bound 50 %)")


if __name__ == "__main__":
    main()

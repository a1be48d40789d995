"""Capacity at SLO: probes run by the search vs a linear sweep of the same bounds at the same
resolution (every ``tolerance`` from ``min`` to ``max``), both on the local mocker stack, measured
in one run of this script. The recipe is local-agg-2x-mocker with 4 sequence slots per replica,
so TTFT jumps once requests queue: the SLO boundary lies inside the bounds."""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import yaml

from common import BIN, copy_workflow, header, snakemake

RECIPE = "local-agg-2x-mocker"


def _workflow(tmp: Path, label: str, a, concurrency: list[int], search: bool) -> Path:
    wf = copy_workflow(tmp / label, [RECIPE])
    f = wf / "recipes" / f"{RECIPE}.yaml"
    doc = yaml.safe_load(f.read_text())
    doc["engine"]["args"] += ["--max-num-seqs", "4"]
    doc["scenario"]["duration_s"] = a.duration
    doc["concurrency"] = concurrency
    if search:
        doc["capacity"] = {"min": a.min, "max": a.max, "tolerance": a.tolerance}
    doc["slo"] = {"ttft_p95_s": a.slo}
    f.write_text(yaml.safe_dump(doc, sort_keys=False))
    return wf


def _run(wf: Path, target: str) -> float:
    t = time.perf_counter()
    r = snakemake(wf, target, timeout=3600)
    if r.returncode:
        raise SystemExit((r.stdout + r.stderr)[-3000:])
    return time.perf_counter() - t


def _linear_capacity(wf: Path, slo: float, points: list[int]) -> tuple[int | None, int | None]:
    """(highest point meeting the SLO below the first miss, the first miss) of the linear sweep."""
    held = missed = None
    for c in points:
        p95 = json.loads((wf / f"results/{RECIPE}/c{c}.json").read_text())["figures"]["ttft_s"]["p95"]
        if p95 > slo:
            missed = c
            break
        held = c
    return held, missed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--duration", type=int, default=8, help="benchmark seconds per point")
    ap.add_argument("--min", type=int, default=2)
    ap.add_argument("--max", type=int, default=24)
    ap.add_argument("--tolerance", type=int, default=2)
    ap.add_argument("--slo", type=float, default=0.25, help="TTFT p95 limit, seconds")
    a = ap.parse_args()
    cmd = f"{BIN}/python bench/capacity_search.py --duration {a.duration} --min {a.min} --max {a.max}"
    cmd += f" --tolerance {a.tolerance} --slo {a.slo}"
    header(f"capacity search vs linear sweep (c{a.min}..c{a.max} by {a.tolerance}, TTFT p95 <= {a.slo} s)", cmd)
    linear = list(range(a.min, a.max + 1, a.tolerance))
    with tempfile.TemporaryDirectory() as tmp:
        wf = _workflow(Path(tmp), "search", a, [a.min], search=True)
        search_s = _run(wf, f"results/{RECIPE}/capacity.json")
        cap = json.loads((wf / f"results/{RECIPE}/capacity.json").read_text())
        wf_lin = _workflow(Path(tmp), "linear", a, linear, search=False)
        linear_s = _run(wf_lin, "results/summary.md")
        lin_held, lin_missed = _linear_capacity(wf_lin, a.slo, linear)
    probes = [p["concurrency"] for p in cap["probes"]]
    print(f"search : {len(probes)} probes {probes}  wall {search_s:.1f} s")
    print(f"         capacity c{cap['capacity']}, lowest miss c{cap['lowest_miss']} ({cap['outcome']})")
    print(f"linear : {len(linear)} points  wall {linear_s:.1f} s")
    print(f"         highest meeting the SLO below the first miss c{lin_held}, first miss c{lin_missed}")
    print(f"saved  : {len(linear) - len(probes)} points, {linear_s - search_s:.1f} s of wall time")


if __name__ == "__main__":
    main()

"""A capacity search: engine starts, allocations, queue waits and GPU-hours with one allocation per
probe (each probe its own job, as before held stacks) vs one held allocation, side by side.

On paper: seed 002's GB300 1p1d shape (dsv4-pro-gb300-1p1d-pdep8-ddep8-mtp on profiles/slurm-gb300):
GPUs, startup bound (the profile's readiness timeout) and per-point time (warm-up + duration + grace)
from its rendered plan; the search bounds are assumed (the seed recipe declares none). Measured:
the local capacity recipe (local-agg-2x-mocker-capacity) searched once on one stack and once with
one stack per probe (--config stack_reuse=0, the local stand-in for one allocation per probe)."""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import time
from pathlib import Path

import yaml

from common import BIN, ROOT, copy_workflow, header, snakemake

sys.path.insert(0, str(ROOT / "scripts"))
from servesweep.capacity.search import Bounds, decide, probes_left_at_most  # noqa: E402
from servesweep.workflow.selection import Selection  # noqa: E402

GB300 = "dsv4-pro-gb300-1p1d-pdep8-ddep8-mtp"
LOCAL = "local-agg-2x-mocker-capacity"
ASSUMED_BOUNDS = {"min": 64, "max": 1024, "tolerance": 32}  # around the seed's c384


def on_paper(probes: int | None) -> None:
    sel = Selection(ROOT, "gb300", [GB300])
    plan, _ = sel.index.rendered(GB300, sel.recipes[GB300].concurrency[0])
    res = plan["resources"]
    gpus = res["nodes"] * res["gpus_per_node"]
    bounds = Bounds.of(ASSUMED_BOUNDS)
    worst = probes_left_at_most(bounds, decide(bounds, {}))
    n = probes or worst
    print(f"## on paper: {GB300} on slurm-gb300 ({gpus} GPUs on {res['nodes']} nodes)")
    print(f"search {ASSUMED_BOUNDS} (assumed): worst case {worst} probes; counted: {n} probes")
    for label, startup in (
        ("startup = the plan's bound (readiness timeout + margin)", res["startup_s"]),
        ("startup ~20 min", 1200.0),
    ):
        point = res["point_s"]
        per_probe = n * (startup + point) * gpus / 3600
        held = (startup + n * point) * gpus / 3600
        print(f"\n{label} ({startup:.0f} s), per point {point:.0f} s:")
        print(f"  {'':<26}{'allocations':>12}{'queue waits':>13}{'engine starts':>15}{'GPU-h':>9}")
        print(f"  {'one allocation per probe':<26}{n:>12}{n:>13}{n:>15}{per_probe:>9.1f}")
        print(f"  {'one held allocation':<26}{1:>12}{1:>13}{1:>15}{held:>9.1f}")
        print(f"  saved: {per_probe - held:.1f} GPU-h and {n - 1} queue waits for a {res['nodes']}-node allocation")


def measured(duration: int) -> None:
    """The search on one stack, then the same probes with one stack each (the search's outcome
    depends on the measurements, so the second run takes the first one's probes as a sweep)."""
    print(f"\n## measured: {LOCAL} (local mocker stack, {duration} s per probe)")
    print(f"  {'':<26}{'probes':>7}{'stacks':>8}{'engine starts':>15}{'GPU-h':>9}{'wall s':>9}")
    with tempfile.TemporaryDirectory() as tmp:
        wf, wall = _search(Path(tmp) / "held", duration, None)
        probes, stacks, gpu_h, starts = _count(wf)
        rows = [("one held stack", len(probes), stacks, starts, gpu_h, wall)]
        wf, wall = _search(Path(tmp) / "per-probe", duration, probes)
        _, stacks, gpu_h, starts = _count(wf, probes)
        rows.insert(0, ("one stack per probe", len(probes), stacks, starts, gpu_h, wall))
    for label, n, stacks, starts, gpu_h, wall in rows:
        print(f"  {label:<26}{n:>7}{stacks:>8}{starts:>15}{gpu_h:>9.4f}{wall:>9.1f}")
    print(f"  probes: {probes}")


def _search(dest: Path, duration: int, probes: list[int] | None) -> tuple[Path, float]:
    """The capacity search (probes None), or those probes as a sweep with one stack per point."""
    wf = copy_workflow(dest, [LOCAL])
    f = wf / "recipes" / f"{LOCAL}.yaml"
    doc = yaml.safe_load(f.read_text())
    doc["scenario"]["duration_s"] = duration
    extra, target = [], [f"results/{LOCAL}/capacity.json"]
    if probes:
        doc.pop("capacity")
        doc["concurrency"] = probes
        extra, target = ["--config", "stack_reuse=0"], [f"results/{LOCAL}/c{c}.json" for c in probes]
    f.write_text(yaml.safe_dump(doc, sort_keys=False))
    t = time.perf_counter()
    r = snakemake(wf, *target, *extra, timeout=3600)
    if r.returncode:
        raise SystemExit((r.stdout + r.stderr)[-3000:])
    return wf, time.perf_counter() - t


def _count(wf: Path, probes: list[int] | None = None) -> tuple[list[int], int, float, int]:
    """(probes, stacks, GPU-hours: each stack from its first point's start, before the stack
    started, to its last point's end, engine starts) from the results and logs."""
    if probes is None:
        cap = json.loads((wf / f"results/{LOCAL}/capacity.json").read_text())
        probes = sorted(p["concurrency"] for p in cap["probes"])
    docs = [json.loads((wf / f"results/{LOCAL}/c{c}.json").read_text()) for c in probes]
    by_stack: dict[str, list] = {}
    for d in docs:
        by_stack.setdefault(d["identity"]["stack"]["id"], []).append(d)
    seconds = 0.0
    for points in by_stack.values():
        points.sort(key=lambda d: d["identity"]["stack"]["position"])
        first, last = points[0]["identity"], points[-1]["identity"]
        seconds += (_epoch(last["end_time"]) - _epoch(first["start_time"])) * first["topology"]["gpus"]
    logs = [*wf.glob("logs/stacks/*/*/keeper-driver.log"), *wf.glob("logs/*/c*/driver.log")]
    starts = sum(len(re.findall(r"\] starting \d+ processes", p.read_text())) for p in logs)
    return probes, len(by_stack), seconds / 3600, starts


def _epoch(iso: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(iso).timestamp()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--duration", type=int, default=6, help="benchmark seconds per local probe")
    ap.add_argument("--probes", type=int, help="probes counted on paper (default: the worst case)")
    ap.add_argument("--paper-only", action="store_true")
    a = ap.parse_args()
    header("capacity search: one allocation per probe vs held", f"{BIN}/python bench/held_search.py")
    on_paper(a.probes)
    if not a.paper_only:
        measured(a.duration)


if __name__ == "__main__":
    main()

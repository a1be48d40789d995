"""The test suite's wall time, by marker and by worker: runs pytest as `make test` does (or reads a
timeline a run already wrote) and prints where the time went. Each test appends one line to the
timeline (tests/conftest.py, SERVESWEEP_TEST_TIMELINE): worker, marker, start, end.

    python bench/suite_time.py                 # run the suite (3 workers), then report
    python bench/suite_time.py --timeline F    # report a timeline written before
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PYTEST = ROOT / ".venvs/project/bin/pytest"


def run_suite(workers: int, timeline: Path, extra: list[str]) -> tuple[float, int]:
    cmd = [str(PYTEST), "-n", str(workers), "--dist", "loadscope", "--no-loadscope-reorder", "-q"]
    env = dict(os.environ, SERVESWEEP_TEST_TIMELINE=str(timeline))
    t0 = time.monotonic()
    rc = subprocess.run([*cmd, *extra], cwd=ROOT, env=env).returncode
    return time.monotonic() - t0, rc


def report(lines: list[dict], wall: float | None) -> None:
    if not lines:
        sys.exit("no test in the timeline")
    t0, t1 = min(x["start"] for x in lines), max(x["end"] for x in lines)
    print(
        f"tests: {len(lines)}; first start to last end: {(t1 - t0) / 60:.1f} min"
        + (f"; pytest wall (collection and worker start included): {wall / 60:.1f} min" if wall else "")
    )
    by_marker, by_worker = defaultdict(float), defaultdict(list)
    for x in lines:
        by_marker[x["marker"]] += x["end"] - x["start"]
        by_worker[x["worker"]].append(x)
    print("\ntest time by marker (summed over workers):")
    for m, s in sorted(by_marker.items(), key=lambda kv: -kv[1]):
        print(f"  {m:<12} {s / 60:6.1f} min")
    print("\nby worker: busy, idle at the end, its slowest tests:")
    for w, xs in sorted(by_worker.items()):
        busy = sum(x["end"] - x["start"] for x in xs)
        last = max(x["end"] for x in xs)
        slow = ", ".join(f"{x['test'].split('::')[-1][:40]} {x['end'] - x['start']:.0f}s" for x in
                         sorted(xs, key=lambda x: x["start"] - x["end"])[:3])  # fmt: skip
        print(f"  {w:<6} {len(xs):>3} tests  busy {busy / 60:5.1f} min  idle {(t1 - last) / 60:4.1f} min  ({slow})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workers", type=int, default=3)
    ap.add_argument("--timeline", type=Path, help="report this timeline instead of running the suite")
    ap.add_argument("pytest_args", nargs="*", help="passed to pytest (e.g. -m slurm)")
    a = ap.parse_args()
    wall = None
    timeline = a.timeline
    if timeline is None:
        timeline = Path(tempfile.mkdtemp(prefix="suite-time-")) / "timeline.jsonl"
        wall, rc = run_suite(a.workers, timeline, a.pytest_args)
        print(f"\npytest exit code {rc}; timeline {timeline}")
    report([json.loads(x) for x in timeline.read_text().splitlines() if x.strip()], wall)


if __name__ == "__main__":
    main()

"""Request-plane TLS on and off on the same local stack (2 mocker replicas behind the Dynamo frontend
and KV router) at its highest concurrency: req/s, TTFT p50/p99 and ITL p50/p99, alternating the two
settings round by round so drift hits both; the spread over rounds is the noise."""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

from common import BIN, copy_workflow, header

RECIPE = "local-agg-2x-mocker"
FIGURES = {
    "req/s": lambda f: f["request_throughput"],
    "TTFT p50 ms": lambda f: f["ttft_s"]["p50"] * 1000,
    "TTFT p99 ms": lambda f: f["ttft_s"]["p99"] * 1000,
    "ITL p50 ms": lambda f: f["itl_ms"]["p50"],
    "ITL p99 ms": lambda f: f["itl_ms"]["p99"],
}


def workflow(root: Path, tls: bool, duration: float) -> tuple[Path, int]:
    wf = copy_workflow(root / ("tls-on" if tls else "tls-off"), recipes=[RECIPE])
    facts = wf / "profiles/local/cluster.yaml"
    doc = yaml.safe_load(facts.read_text())
    doc.setdefault("control_plane", {})["request_plane_tls"] = tls
    facts.write_text(yaml.safe_dump(doc, sort_keys=False))
    recipe = wf / f"recipes/{RECIPE}.yaml"
    r = yaml.safe_load(recipe.read_text())
    r["scenario"]["duration_s"] = duration
    recipe.write_text(yaml.safe_dump(r, sort_keys=False))
    conc = max(r["concurrency"])
    plan = subprocess.run([str(BIN / "servesweep"), "plan", str(recipe), "--conc", str(conc)], cwd=wf,
                          capture_output=True, text=True, check=True).stdout  # fmt: skip
    assert json.loads(plan)["discovery"]["request_plane_tls"] is tls
    (wf / "plan.json").write_text(plan)
    return wf, conc


def point(wf: Path, i: int) -> dict:
    out = f"results/r{i}.json"
    r = subprocess.run([str(BIN / "servesweep"), "run-point", "plan.json", out], cwd=wf, capture_output=True, text=True)
    if r.returncode:
        raise SystemExit(r.stderr[-3000:])
    doc = json.loads((wf / out).read_text())
    assert doc["identity"]["request_plane_tls"] is ("tls-on" in wf.name)
    return doc["figures"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--duration", type=float, default=20)
    a = ap.parse_args()
    header(
        "request-plane TLS on vs off",
        f"{BIN}/python bench/request_plane_tls.py --rounds {a.rounds} --duration {a.duration:g}",
    )
    with tempfile.TemporaryDirectory() as tmp:
        (on, conc), (off, _) = workflow(Path(tmp), True, a.duration), workflow(Path(tmp), False, a.duration)
        runs: dict[str, list[dict]] = {"on": [], "off": []}
        for i in range(a.rounds):
            for name, wf in (("on", on), ("off", off)) if i % 2 == 0 else (("off", off), ("on", on)):
                runs[name].append(point(wf, i))
    print(f"{RECIPE} at c{conc}, {a.duration:g} s per point, {a.rounds} rounds each (alternating)\n")
    print(f"{'figure':<14} {'TLS on: median [min, max]':<32} {'TLS off: median [min, max]':<32} on/off")
    for label, get in FIGURES.items():
        cells, meds = [], []
        for name in ("on", "off"):
            xs = [get(f) for f in runs[name]]
            meds.append(statistics.median(xs))
            cells.append(f"{meds[-1]:8.2f} [{min(xs):.2f}, {max(xs):.2f}]")
        print(f"{label:<14} {cells[0]:<32} {cells[1]:<32} {meds[0] / meds[1]:.3f}")


if __name__ == "__main__":
    sys.exit(main())

"""One engine start per server configuration: wall time and engine starts of a 4-point local curve,
on one warm stack vs one stack per point (--config stack_reuse=0), measured in one run of this script.
``--recipe local-agg-2x-vllm-cpu`` measures it with real vLLM replicas (CPU build). ``--scenarios``
adds a second recipe with the same servers and a synthetic scenario: one stack for both vs one stack
per recipe (the second recipe's servers made to differ by an env var nothing reads)."""

from __future__ import annotations

import argparse
import re
import tempfile
import time
from pathlib import Path

import yaml

from servesweep.contract.paths import RESULTS, point_files

from common import BIN, copy_workflow, header, snakemake

CONCURRENCIES = [2, 4, 8, 16]


def sweep(tmp: Path, recipe: str, label: str, duration: int, *extra: str, second: str | None = None):
    """(wall s, stacks started, points written) of the 4-point curve from a fresh workflow copy;
    ``second``: None, or "same"/"other" servers for a second recipe with a synthetic scenario."""
    wf = copy_workflow(tmp / label, [recipe])
    f = wf / "recipes" / f"{recipe}.yaml"
    doc = yaml.safe_load(f.read_text())
    doc["scenario"]["duration_s"] = duration
    doc["concurrency"] = CONCURRENCIES
    f.write_text(yaml.safe_dump(doc, sort_keys=False))
    if second:
        _second_scenario(wf, doc, other_servers=second == "other")
    t = time.perf_counter()
    r = snakemake(wf, "results/summary.md", *extra, timeout=1800)
    wall = time.perf_counter() - t
    if r.returncode:
        raise SystemExit((r.stdout + r.stderr)[-3000:])
    logs = [*wf.glob("logs/stacks/*/*/keeper-driver.log"), *wf.glob("logs/*/c*/driver.log")]
    starts = sum(len(re.findall(r"\] starting \d+ processes", p.read_text())) for p in logs)
    return wall, starts, len(point_files(wf / RESULTS, every_recipe=True))


def _second_scenario(wf: Path, doc: dict, other_servers: bool) -> None:
    other = yaml.safe_load(yaml.safe_dump(doc))
    other["name"] = f"{doc['name']}-synthetic"
    other["scenario"] = {**other["scenario"], "name": "bench-synthetic"}
    other["scenario"]["dataset"] = {"synthetic": {"isl": 200, "osl": 20, "entries": 200}}
    other["scenario"].pop("session_header", None)
    if other_servers:
        other["env"] = {**(other.get("env") or {}), "SERVESWEEP_BENCH_UNUSED": "1"}
    (wf / "recipes" / f"{other['name']}.yaml").write_text(yaml.safe_dump(other, sort_keys=False))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--duration", type=int, default=10, help="benchmark seconds per point")
    ap.add_argument("--recipe", default="local-agg-2x-mocker")
    ap.add_argument("--scenarios", action="store_true", help="two recipes, one server configuration")
    a = ap.parse_args()
    cmd = f"{BIN}/python bench/warm_stack.py --duration {a.duration} --recipe {a.recipe}"
    if a.scenarios:
        header(f"two scenarios on one server configuration ({a.recipe}, c{CONCURRENCIES} each)", cmd + " --scenarios")
        with tempfile.TemporaryDirectory() as tmp:
            rows = [
                ("one stack per server config", *sweep(Path(tmp), a.recipe, "one", a.duration, second="same")),
                ("one stack per recipe", *sweep(Path(tmp), a.recipe, "two", a.duration, second="other")),
            ]
        _print(rows)
        return
    header(f"warm stack vs one stack per point ({a.recipe}, c{CONCURRENCIES})", cmd)
    with tempfile.TemporaryDirectory() as tmp:
        rows = [
            ("one warm stack per curve", *sweep(Path(tmp), a.recipe, "warm", a.duration)),
            ("one stack per point", *sweep(Path(tmp), a.recipe, "cold", a.duration, "--config", "stack_reuse=0")),
        ]
    _print(rows)


def _print(rows: list) -> None:
    for label, wall, starts, points in rows:
        print(f"{label:<28} {points} points  engine starts {starts}  wall {wall:.1f} s")
    print(f"saved: {rows[1][1] - rows[0][1]:.1f} s of wall time, {rows[1][2] - rows[0][2]} engine starts")


if __name__ == "__main__":
    main()

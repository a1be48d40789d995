"""What an idle profiler costs a point: one vLLM replica on the CPU (the tiny model, c2) measured with
its engine started plain and started with the torch profiler configured but never started (a recipe
whose ``profile`` shares the stack: render/profiling), alternating, each run a fresh workflow copy
and stack. Prints each run's output tok/s and TTFT p50, and the medians side by side."""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

import yaml

from servesweep.contract.paths import plan_file

from common import ROOT, copy_workflow, header, snakemake

NAME = "bench-profiler-idle"


def _recipe(wf: Path, armed: bool, duration_s: int) -> None:
    doc = yaml.safe_load((ROOT / "recipes" / "local-agg-2x-vllm-cpu.yaml").read_text())
    doc |= {"name": NAME, "concurrency": [2]}
    doc["topology"]["aggregated"]["replicas"] = 1
    doc["scenario"]["duration_s"] = duration_s
    doc.pop("evals", None)
    if armed:
        doc["profile"] = {"kind": "torch", "steps": 8}
    (wf / "recipes" / f"{NAME}.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))


def _run(armed: bool, duration_s: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        wf = copy_workflow(Path(tmp) / "wf", recipes=[])
        _recipe(wf, armed, duration_s)
        r = snakemake(wf, f"results/{NAME}/c2.json", timeout=900)
        if r.returncode:
            raise SystemExit(f"run failed:\n{(r.stdout + r.stderr)[-3000:]}")
        argv = json.loads((wf / plan_file(NAME, 2)).read_text())["processes"]
        assert armed == any("--profiler-config" in p["argv"] for p in argv)
        # aiperf's own figures: a point marked client-bound on 2 busy cores has its headline blanked
        export = wf / "logs" / NAME / "c2" / "aiperf" / "profile_export_aiperf.json"
        doc = json.loads(export.read_text())
        return {"tps": doc["output_token_throughput"]["avg"], "ttft": doc["time_to_first_token"]["p50"] / 1000}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--duration", type=int, default=10, help="each point's benchmark window, seconds")
    a = ap.parse_args()
    header(
        "an idle torch profiler against a plain engine (vLLM CPU)", f"python bench/profiler_idle.py --rounds {a.rounds}"
    )
    got: dict[bool, list[dict]] = {False: [], True: []}
    for i in range(a.rounds):
        for armed in (False, True) if i % 2 == 0 else (True, False):
            fig = _run(armed, a.duration)
            got[armed].append(fig)
            said = "armed" if armed else "plain"
            print(f"round {i + 1} {said}: {fig['tps']:.1f} output tok/s, TTFT p50 {fig['ttft']:.4f} s", flush=True)
    for armed in (False, True):
        tps = statistics.median(f["tps"] for f in got[armed])
        ttft = statistics.median(f["ttft"] for f in got[armed])
        print(f"{'armed' if armed else 'plain'}: median {tps:.1f} output tok/s, TTFT p50 {ttft:.4f} s")
    plain, armed = (statistics.median(f["tps"] for f in got[k]) for k in (False, True))
    print(f"armed / plain output tok/s: {armed / plain:.3f}")


if __name__ == "__main__":
    main()

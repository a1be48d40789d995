"""Capacity at SLO on the real local stack: a mocker recipe whose SLO is crossed inside its bounds.

Two mocker replicas with 4 sequence slots each: past 8 concurrent sessions requests queue and
TTFT jumps, so the SLO boundary lies inside the bounds. Nothing here assumes where exactly: each
assertion is checked against the probes' own measured figures.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from helpers import ROOT, copy_workflow, no_processes_left, snakemake, write_recipe

pytestmark = pytest.mark.integration
NAME = "local-agg-2x-mocker-capacity"
BASE = yaml.safe_load((ROOT / "recipes" / f"{NAME}.yaml").read_text())
TARGET = f"results/{NAME}/capacity.json"
BOUNDS = {**BASE["capacity"], "tolerance": 1}  # a finer search than the demo's: unprobed gaps below capacity


def _recipe(wf: Path, slo: float) -> None:
    write_recipe(
        wf, BASE, NAME, conc=(4,), duration=8, mutate=lambda doc: doc.update(slo={"ttft_p95_s": slo}, capacity=BOUNDS)
    )


@pytest.fixture
def cwf(tmp_path):
    wf = copy_workflow(tmp_path / "wf", recipes=[])
    _recipe(wf, BASE["slo"]["ttft_p95_s"])
    return wf


def ran(r: subprocess.CompletedProcess) -> list[str]:
    return re.findall(r"output: (results/[^,\s]+\.json)", r.stdout + r.stderr)


def probes(wf: Path) -> dict[int, dict]:
    """Every point result of the recipe: concurrency -> (TTFT p95, stack id, end time)."""
    out = {}
    for f in (wf / f"results/{NAME}").glob("c*.json"):
        if f.stem[1:].isdigit():
            doc = json.loads(f.read_text())
            ident = doc["identity"]
            out[int(f.stem[1:])] = {"p95": doc["figures"]["ttft_s"]["p95"], "stack": ident["stack"]["id"]}
            out[int(f.stem[1:])]["end"] = ident["end_time"]
    return out


def check_capacity(wf: Path, slo: float) -> dict:
    """capacity.json agrees with the measured probes: held meets, lowest miss misses, within tolerance."""
    cap = json.loads((wf / TARGET).read_text())
    seen = probes(wf)
    assert [p["concurrency"] for p in cap["probes"]] == sorted(c for c in seen if BOUNDS["min"] <= c <= BOUNDS["max"])
    held, missed = cap["capacity"], cap["lowest_miss"]
    assert held is not None and missed is not None, f"the SLO was not crossed inside the bounds: {cap}"
    assert seen[held]["p95"] <= slo < seen[missed]["p95"] and held < missed
    assert missed - held <= BOUNDS["tolerance"] and cap["outcome"] == "within tolerance"
    assert all(seen[c]["p95"] <= slo for c in seen if c < missed), "every probe below the lowest miss meets"
    assert cap["at_capacity"]["total_tps_per_gpu"] > 0
    return cap


def _tighter_slo(wf: Path, held: int) -> tuple[float, int | None]:
    """A tighter SLO under which the search must probe again below the old capacity, and that probe
    (decided by the search itself from the measured results, whatever their shape: at low
    concurrency the mocker's TTFT is flat and its order is noise). Where that noise leaves no such
    SLO (each gap between probes has its lower end slower, as under a CPU hog), one the known probes
    decide alone with a lower capacity, and None: the search then reuses them and runs nothing."""
    from servesweep.capacity.search import Bounds, decide, probe_met

    bounds, docs = (
        Bounds.of(BOUNDS),
        {c: json.loads((wf / f"results/{NAME}/c{c}.json").read_text()) for c in probes(wf)},
    )
    values = sorted({d["figures"]["ttft_s"]["p95"] for c, d in docs.items() if c <= held}, reverse=True)
    decided = []
    for hi, lo in zip(values, values[1:], strict=False):
        slo = (hi + lo) / 2
        d = decide(bounds, {c: probe_met(doc, {"ttft_p95_s": slo}) for c, doc in docs.items() if c in bounds})
        if d.next is not None and d.next < held:
            return slo, d.next
        moved = d.held is not None and d.missed is not None and d.held < held
        if d.next is None and moved and d.missed - d.held <= BOUNDS["tolerance"]:
            decided.append(slo)
    if decided:
        return decided[0], None
    pytest.fail(f"no SLO between the measured TTFT p95s below c{held} moves the capacity: {probes(wf)}")


def test_capacity_search_caches_probes_and_reuses_them_when_the_slo_tightens(cwf):
    # 1. the dry run names the first probe and runs nothing
    r = snakemake(cwf, "-n", TARGET)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    assert "known none; next probe c2" in r.stderr and f"wildcards: recipe={NAME}, conc=2" in r.stdout + r.stderr
    assert not (cwf / "results").exists()

    # 2. the summary needs the sweep point c4 and the capacity: c4 doubles as a probe, run once
    with no_processes_left(cwf):
        r = snakemake(cwf, "results/summary.md", timeout=900)
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    outputs = ran(r)
    assert outputs.count(f"results/{NAME}/c4.json") == 1 and TARGET in outputs
    first = probes(cwf)
    assert len({p["stack"] for p in first.values()}) == 1, "probes of one search share one warm stack"
    # a probe outside the sweep has a plan of its own (the first written before the DAG, the others
    # by their jobs), and the capacity job took the search off its stack's curve file
    probe_plans = {int(p.stem.removeprefix("probe-c")) for p in (cwf / f".plans/{NAME}").glob("probe-c*.json")}
    assert probe_plans == set(first) - {4} and len(probe_plans) > 1, (probe_plans, first)
    assert len(list((cwf / f"logs/{NAME}").glob("probe-c*.plan.log"))) == len(probe_plans) - 1
    curves = [json.loads(p.read_text()) for p in (cwf / ".plans/curves").glob("*.json")]
    assert curves and all(c["searching"] == [] for c in curves), curves
    cap = check_capacity(cwf, BASE["slo"]["ttft_p95_s"])
    md = (cwf / "results/summary.md").read_text()
    assert "## Capacity at SLO" in md and f"| c{cap['capacity']} " in md

    # 3. a second run runs nothing
    r = snakemake(cwf, TARGET, "results/summary.md")
    assert r.returncode == 0 and ran(r) == [], (r.stdout + r.stderr)[-3000:]

    # 4. a tighter SLO: the dry run names the new probe; the run adds probes below the old capacity only
    slo, expected_next = _tighter_slo(cwf, cap["capacity"])
    _recipe(cwf, slo)
    r = snakemake(cwf, "-n", TARGET)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    listed = re.findall(rf"wildcards: recipe={NAME}, conc=(\d+)", r.stdout + r.stderr)
    if expected_next is not None:
        assert f"next probe c{expected_next}," in r.stderr, r.stderr[-2000:]
    assert listed == ([str(expected_next)] if expected_next is not None else []), r.stderr[-2000:]
    with no_processes_left(cwf):
        r = snakemake(cwf, TARGET, timeout=900)
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    new = [int(m) for m in re.findall(rf"output: results/{NAME}/c(\d+)\.json", r.stdout + r.stderr)]
    if expected_next is None:  # decided by the probes already measured: none runs again
        assert new == [], new
    else:
        assert new and new[0] == expected_next and all(c < cap["capacity"] for c in new), (new, cap["capacity"])
    after = probes(cwf)
    assert all(after[c] == first[c] for c in first), "no earlier probe was rerun"
    tight = check_capacity(cwf, slo)
    assert tight["capacity"] < cap["capacity"] and tight["slo"] == {"ttft_p95_s": slo}

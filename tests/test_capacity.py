"""Capacity at SLO without a stack: the search, capacity.json and the summary's capacity tables."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from servesweep.capacity.search import Bounds, decide, probes_left_at_most
from servesweep.fileio.errors import InputError
from servesweep.report.capacity import capacity_deltas, capacity_doc, capacity_section, load_capacities, write_capacity
from servesweep.report.summary import build_summary
from servesweep.tools.samples import result_doc

from helpers import copy_workflow, snakemake

SLO = {"ttft_p95_s": 0.5}


def search(bounds: Bounds, capacity: int, known: dict[int, bool] | None = None) -> tuple[list[int], object]:
    """Run the search against a stack that meets the SLO up to ``capacity``: (probes run, decision)."""
    met, run = dict(known or {}), []
    while not (d := decide(bounds, met)).done:
        assert d.next not in met, f"probe c{d.next} asked for twice"
        run.append(d.next)
        met[d.next] = d.next <= capacity
    return run, d


@pytest.mark.parametrize("bounds", [Bounds(2, 64, 2), Bounds(1, 100, 1), Bounds(8, 512, 16), Bounds(4, 4, 1)])
def test_search_lands_within_tolerance_of_any_capacity_and_its_worst_case_is_an_upper_bound(bounds):
    worst = probes_left_at_most(bounds, decide(bounds, {}))
    for capacity in range(0, bounds.high + 3):
        run, d = search(bounds, capacity)
        assert len(run) <= worst, (capacity, run)
        if capacity < bounds.low:
            assert (d.held, d.missed, d.outcome) == (None, bounds.low, "misses the SLO at min")
        elif capacity >= bounds.high:
            assert (d.held, d.missed, d.outcome) == (bounds.high, None, "meets the SLO at max")
        else:
            assert d.held <= capacity < d.missed and d.missed - d.held <= bounds.tolerance, (capacity, d)


def test_search_is_exponential_then_bisects():
    run, d = search(Bounds(2, 64, 1), capacity=13)
    assert run == [2, 4, 8, 16, 12, 14, 13]
    assert (d.held, d.missed) == (13, 14)


def test_known_results_anywhere_in_the_bounds_narrow_the_search():
    """Sweep points and earlier probes count wherever they lie; outside the bounds they do not."""
    known = {3: True, 24: False, 500: True}
    run, d = search(Bounds(2, 64, 1), capacity=13, known=known)
    assert run == [13, 18, 15, 14]  # straight to bisection: 24 is known to miss
    assert (d.held, d.missed) == (13, 14)


def test_a_tighter_slo_reuses_every_probe_and_runs_only_new_ones_below_the_old_boundary():
    bounds = Bounds(2, 64, 1)
    first, d1 = search(bounds, capacity=13)
    # the same probes judged against a tighter SLO: now only c5 and below hold
    rejudged = {c: c <= 5 for c in first}
    second, d2 = search(bounds, capacity=5, known=rejudged)
    assert second and all(c < d1.held for c in second) and not set(second) & set(first)
    assert (d2.held, d2.missed) == (5, 6)


def test_a_pass_above_the_first_miss_is_noise_not_capacity():
    d = decide(Bounds(2, 64, 1), {2: True, 4: True, 8: False, 16: True, 5: True, 6: True, 7: True})
    assert (d.held, d.missed, d.next, d.ignored) == (7, 8, None, (16,))


def _write(tmp_path: Path, recipe: str, conc: int, ttft: float, tps: float = 1000.0) -> str:
    p = tmp_path / "results" / recipe / f"c{conc}.json"
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(result_doc(recipe, conc, ttft, tps)))
    return str(p)


def _settings(recipe: str = "fast", slo: dict = SLO, tolerance: int = 2) -> dict:
    return {
        "recipe": recipe,
        "source": f"recipes/{recipe}.yaml",
        "scenario": "chat",
        "cluster": "local",
        "bounds": {"min": 2, "max": 64, "tolerance": tolerance},
        "slo": slo,
    }


def test_capacity_doc_names_capacity_lowest_miss_and_the_probes(tmp_path):
    probes = [_write(tmp_path, "fast", c, ttft) for c, ttft in ((2, 0.1), (4, 0.2), (8, 0.45), (16, 0.9), (12, 0.6))]
    probes.append(_write(tmp_path, "fast", 10, 0.55))
    doc = capacity_doc(_settings(), probes)
    assert (doc["capacity"], doc["lowest_miss"], doc["outcome"]) == (8, 10, "within tolerance")
    assert [p["concurrency"] for p in doc["probes"]] == [2, 4, 8, 10, 12, 16]
    assert [p["met"] for p in doc["probes"]] == [True, True, True, False, False, False]
    assert doc["probes"][3]["verdicts"] == [{"slo": "ttft_p95_s", "limit": 0.5, "value": 0.55, "met": False}]
    assert doc["at_capacity"]["total_tps_per_gpu"] == 1000.0 * 10 / 2
    assert doc["probes"][0]["gpu_hours"] == 2 * (60.0 + 30.0) / 3600  # 2 GPUs x (benchmark + its stack's start)
    assert "| 0.300 " in "\n".join(capacity_section([doc], None))  # 6 probes' GPU-hours


def test_a_search_meeting_a_client_bound_probe_stops_and_names_it(tmp_path):
    probes = [_write(tmp_path, "fast", c, 0.1) for c in (2, 4, 8)]
    doc = json.loads(Path(probes[2]).read_text())
    doc["marks"] = [{"mark": "client-bound", "reason": "client-bound: aiperf's event loop stalled 9 times"}]
    Path(probes[2]).write_text(json.dumps(doc))
    out = tmp_path / "capacity.json"
    cap = write_capacity(_write_settings(tmp_path), probes, out, tmp_path / "capacity.png")
    assert cap["capacity"] is None and cap["outcome"] == "stopped: c8 client-bound: aiperf's event loop stalled 9 times"
    assert [p["stopped"] for p in cap["probes"]] == [None, None, "client-bound: aiperf's event loop stalled 9 times"]
    assert (tmp_path / "capacity.png").stat().st_size > 0 and "| stopped: c8 client-bound" in "\n".join(
        capacity_section(load_capacities([out]), None)
    )


def _write_settings(tmp_path: Path) -> Path:
    p = tmp_path / "settings.json"
    p.write_text(json.dumps(_settings()))
    return p


def test_an_undecided_search_or_a_foreign_result_writes_nothing(tmp_path):
    probes = [_write(tmp_path, "fast", c, 0.1) for c in (2, 4)]
    with pytest.raises(InputError, match="undecided: probe c8 has no result"):
        capacity_doc(_settings(), probes)
    with pytest.raises(InputError, match="not a result of fast"):
        capacity_doc(_settings(), probes + [_write(tmp_path, "slow", 8, 0.9)])


def _cap(recipe: str, capacity: int | None, tps: float, slo: dict = SLO, tolerance: int = 2) -> dict:
    return {
        "schema": "servesweep.capacity/1",
        "recipe": recipe,
        "scenario": "chat",
        "cluster": "local",
        "slo": slo,
        "bounds": {"min": 2, "max": 64, "tolerance": tolerance},
        "capacity": capacity,
        "lowest_miss": None if capacity is None else capacity + tolerance,
        "outcome": "within tolerance",
        "at_capacity": {"total_tps_per_gpu": tps, "req_s": 3.0},
        "probes": [
            {"concurrency": c, "met": True, "verdicts": [], "result": f"results/{recipe}/c{c}.json"}
            for c in (2, capacity or 2)
        ],
    }


def test_capacity_deltas_judge_moves_against_tolerance_and_refuse_a_changed_slo():
    new = [_cap("a", 12, 1100.0), _cap("b", 30, 900.0), _cap("c", 8, 500.0, slo={"ttft_p95_s": 0.2}), _cap("d", 8, 1)]
    base = [_cap("a", 11, 1000.0), _cap("b", 20, 1000.0), _cap("c", 16, 700.0)]
    rows = {r[0]: r for r in capacity_deltas(new, base)}
    assert set(rows) == {"a", "b", "c"}
    assert rows["a"][3] == "+1 (+9%) ≈ within tolerance" and rows["a"][4] == "+10.0%"
    assert rows["b"][3] == "+10 (+50%) ▲ better" and rows["b"][4] == "-10.0%"
    assert rows["c"][3] == "SLO changed: not compared"
    text = "\n".join(capacity_section(new, base))
    assert "## Capacity at SLO" in text and "### Capacity against the baseline" in text
    assert "| c30 " in text and "ttft_p95_s ≤ 0.5" in text


def test_summary_has_the_capacity_table_and_its_baseline_deltas(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    point = _write(tmp_path, "fast", 4, 0.2)
    cap = tmp_path / "results/fast/capacity.json"
    cap.write_text(json.dumps(_cap("fast", 24, 2000.0)))
    base = tmp_path / "base/fast/capacity.json"
    base.parent.mkdir(parents=True)
    base.write_text(json.dumps(_cap("fast", 16, 1500.0)))
    sel = tmp_path / "selection.json"
    points = [{"recipe": "fast", "concurrency": 4, "result": point, "scenario": "chat", "log_dir": "logs/fast/c4"}]
    sel.write_text(json.dumps({"cluster": "local", "points": points, "slo": {"fast": SLO}}))
    out = tmp_path / "results/summary.md"
    build_summary([Path(point)], sel, out, baseline=tmp_path / "base", capacities=[cap])
    md = out.read_text()
    assert "## Capacity at SLO" in md and "| c24 " in md and "2 000" in md
    assert "+8 (+50%) ▲ better" in md and "+33.3%" in md


PROD = "gemma4-livekit-2tp4-dyn-vllm-prod"


def test_slurm_dry_run_runs_a_search_on_a_held_stack_sized_for_its_worst_case(tmp_path):
    """On Slurm the production recipe's search holds its stack (a Slurm job of its own): its points
    are local steps into it, and the stack's job is sized for one startup, the stale sweep points,
    the search's worst case of probes and nothing more."""
    from servesweep.capacity.search import probes_left_at_most
    from servesweep.contract.plan import CurveHint, Plan
    from servesweep.run.stacks.held import HoldRequest
    from servesweep.workflow.entry import load_or_exit

    wf = copy_workflow(tmp_path / "wf", [PROD])
    r = snakemake(wf, "-n", "results/summary.md", "--config", "cluster=hcm-hgx02")
    assert r.returncode == 0, r.stderr[-3000:]
    assert (
        "capacity of gemma4-livekit-2tp4-dyn-vllm-prod (c32..c256, tolerance 8): known none; next probe c32" in r.stderr
    )
    held = set(re.findall(rf"checkpoint held_point:\n(?:[^\n]*\n)*?\s+wildcards: recipe={PROD}, conc=(\d+)", r.stdout))
    assert held == {"32", "96", "150"}, r.stdout[-3000:]
    assert "checkpoint point:" not in r.stdout  # no group job for these points
    sel = load_or_exit(wf, "hcm-hgx02").selection
    stale = [(PROD, c) for c in (32, 96, 150)]
    plan = json.loads((wf / f".plans/{PROD}/probe-c32.json").read_text())  # a probe outside the sweep
    search = sel.searches.bounds(PROD)
    _known, decision = sel.searches.decision(PROD)
    probes = probes_left_at_most(search, decision)
    points_s = sel.stacks.points_s(PROD, stale)
    assert points_s == (3 + probes - 1) * plan["resources"]["point_s"]
    # the point's side: the job's shape and time limit from its plan and the curve file
    request = HoldRequest.of(Plan.from_json(plan), CurveHint(3, True, 0.0, points_s), "gpu", None)
    floor = plan["resources"]["startup_s"] + points_s
    assert floor / 60 <= request.runtime_min <= (floor + 600) / 60, (request, floor)
    assert (request.nodes, request.gpus_per_node) == (plan["resources"]["nodes"], plan["resources"]["gpus_per_node"])

"""Numbers you can trust, on fixture exports: a starved client, answers read in one chunk, a window
that stood still and a window too short are marked; their client-timed figures are '–' with the
reason, they are never ranked or drawn, and a capacity search meeting one stops."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

import fixture_exports as fx
from servesweep.capacity.search import Bounds, decide, probe_met
from servesweep.contract.plan import Plan
from servesweep.report.summary import build_summary
from servesweep.run import result, trust
from servesweep.tools import audit

from helpers import plan_of


@pytest.fixture(autouse=True)
def _product_bound(monkeypatch):
    """These tests judge the client at the product's own bound, not the suite's (conftest)."""
    monkeypatch.delenv(trust.STALL_SHARE_ENV, raising=False)


def _document(art: Path, records: list[dict], stalls_ms=(), plan_name: str = "local-agg-2x-mocker") -> dict:
    plan = Plan.from_json(plan_of(plan_name))
    export = fx.summary_export(records)
    fx.write(art, records, list(stalls_ms), export)
    figs, why = result.figures(plan, export, result.Scrapes({}, {}, {}, {}, {}, {}), None)
    stack = {"id": "s1", "position": 1, "startup_s": 1.0, "caches_reset": None, "caches_reset_note": "fresh"}
    facts = result.RunFacts("local-1", ["localhost"], "2026-12-01T00:00:00+00:00", "2026-12-01T00:01:00+00:00",
                            {}, {"bench": 10.0}, str(art), stack)  # fmt: skip
    doc = result.document(plan, figs, why, export, facts) | {"source": None, "logs": _clean_logs()}
    assert result.validate_result(doc) == []
    return doc


def _clean_logs() -> dict:
    return {"tracebacks": 0, "fatal": 0, "by_process": {}, "expected": {}, "missing": [], "clean": True}


def _kinds(doc: dict) -> list[str]:
    return [m["mark"] for m in doc["marks"]]


def test_a_healthy_streamed_window_carries_no_mark_and_keeps_its_figures(tmp_path):
    doc = _document(tmp_path, fx.steady(60), stalls_ms=[30.0, 41.5])
    assert doc["marks"] == [] and doc["silences"] == []
    c = doc["figures"]["client"]
    assert c["stall_warnings"] == 2 and c["worst_stall_ms"] == 41.5 and c["streamed_share"] == 1.0
    assert c["e2e_output_tps_per_user"] == pytest.approx(10 / 0.14)  # 10 tokens in 0.05 + 9 x 0.01 s
    assert doc["figures"]["ttft_s"]["p95"] is not None and doc["identity"]["client_settings"]["duration_s"] == 20


def test_answers_read_in_one_chunk_are_not_streamed_and_their_client_timed_figures_are_unmeasured(tmp_path):
    records = fx.steady(30) + [fx.one_chunk(0.1 + 0.2 * i, 0.3, 40) for i in range(40)]
    doc = _document(tmp_path, records)
    assert _kinds(doc) == ["not streamed"] and "only 43% of 70 answers" in doc["marks"][0]["reason"]
    f = doc["figures"]
    assert f["ttft_s"] == {"p50": None, "p90": None, "p95": None, "p99": None} and f["output_tps_per_user"] is None
    assert "not streamed" in doc["unmeasured"]["output_tps_per_user"]
    assert f["client"]["e2e_output_tps_per_user"] > 0  # tokens / latency: always measured


def test_a_starved_client_is_recorded_and_marked_client_bound(tmp_path):
    doc = _document(tmp_path, fx.steady(60), stalls_ms=[660.0, 420.5, 1210.0])
    c = doc["figures"]["client"]
    assert (c["stall_warnings"], c["worst_stall_ms"]) == (3, 1210.0)
    assert _kinds(doc) == ["client-bound"] and "stalled 3 times for 2.29 s" in doc["marks"][0]["reason"]
    assert doc["figures"]["itl_ms"]["p50"] is None and "client-bound" in doc["unmeasured"]["itl_ms"]


def test_a_paused_and_resumed_window_is_marked_stalled_with_when_and_how_long(tmp_path):
    before = fx.steady(20)  # 0 .. 3.8 s
    held = [fx.request(4.0 + 0.2 * i, 25.0 - 0.2 * i, [0.01] * 9) for i in range(4)]  # answered at 29 s
    after = [fx.request(29.5 + 0.2 * i, 0.05, [0.01] * 9) for i in range(20)]
    doc = _document(tmp_path, before + held + after)
    assert _kinds(doc) == ["stalled"]
    (stall,) = doc["silences"]
    assert stall["at_s"] == pytest.approx(4.0, abs=0.01) and stall["for_s"] == pytest.approx(25.0, abs=0.01)
    assert doc["figures"]["ttft_s"]["p95"] is not None  # the client timed it right: the server stood still


def test_a_long_prefill_is_not_a_stall():
    reqs = [fx.request(i * 12.0, 11.0, [0.01] * 5) for i in range(3)]  # c1, every request waits 11 s
    assert trust.silences(trust.profiling(reqs)) == []


def test_a_window_too_short_is_marked_short(tmp_path):
    doc = _document(tmp_path, fx.steady(13, every_s=0.07))
    assert _kinds(doc) == ["short"] and "13 requests completed in 1.0 s" in doc["marks"][0]["reason"]


def _summary(tmp_path: Path) -> str:
    """Two points: one whose answers were read in one chunk (10x the throughput), one honest."""
    buffered = fx.steady(30) + [fx.one_chunk(0.1 + 0.2 * i, 0.3, 40) for i in range(40)]
    docs = {"buffered": _document(tmp_path / "a", buffered), "honest": _document(tmp_path / "b", fx.steady(60))}
    docs["buffered"]["figures"]["total_tps_per_gpu"] = 10 * docs["honest"]["figures"]["total_tps_per_gpu"]
    points = []
    for name, doc in docs.items():
        doc["identity"]["recipe"] = name
        p = Path("results") / name / "c4.json"
        p.parent.mkdir(parents=True)
        p.write_text(json.dumps(doc))
        points.append({"recipe": name, "concurrency": 4, "result": str(p), "scenario": "chat", "log_dir": "x"})
    sel = Path("sel.json")
    sel.write_text(json.dumps({"cluster": "local", "points": points, "slo": {}}))
    build_summary([Path(p["result"]) for p in points], sel, Path("results/summary.md"))
    return Path("results/summary.md").read_text()


def test_a_marked_point_is_dash_unranked_and_not_drawn_in_the_summary(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    md = _summary(tmp_path)
    row = next(ln for ln in md.splitlines() if ln.startswith("| [buffered]"))
    assert "| – / – / – / – " in row and "| – / – " in row and "⚠ not streamed [2] · no SLO" in row
    assert "[2] not streamed: only 43% of 70 answers arrived in more than one chunk" in md
    best = md.split("## Best setup per concurrency")[1].split("##")[0]
    row = [ln for ln in best.splitlines() if ln.startswith("| ")][1]  # the header, then the one row
    assert row.split("|")[3].strip() == "honest" and row.rstrip(" |").endswith("buffered: not streamed")
    assert "Not drawn as measured: buffered c4 (not streamed)." in md
    csv = pd.read_csv("results/summary.csv").set_index("recipe")
    assert pd.isna(csv.loc["buffered", "output_tps_per_user"]) and csv.loc["buffered", "e2e_tps_per_user"] > 0


def test_the_figure_audit_recomputes_the_summary_from_the_per_request_exports(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _summary(tmp_path)
    rows, bad = audit.audit(Path("results/summary.csv"), tmp_path)
    verdicts = {(r[0].split("/")[1], r[1]): r[4] for r in rows}
    assert bad == 0, [r for r in rows if str(r[4]).startswith("✗")]
    assert verdicts[("honest", "ttft_p95_s")] == "✓" and verdicts[("honest", "req_s")] == "✓"
    assert verdicts[("buffered", "itl_p50_ms")] == "– (not streamed)"
    assert verdicts[("buffered", "e2e_tps_per_user")] == "✓"
    csv = pd.read_csv("results/summary.csv")
    csv.loc[csv["recipe"] == "honest", "ttft_p95_s"] += 0.02  # a figure the export does not support
    csv.to_csv("results/summary.csv", index=False)
    rows, bad = audit.audit(Path("results/summary.csv"), tmp_path)
    assert bad == 1 and [r[1] for r in rows if r[4] == "✗ differs"] == ["ttft_p95_s"]


def test_a_capacity_search_meeting_a_marked_probe_stops_and_names_it():
    marked = {"figures": {}, "marks": [{"mark": "client-bound", "reason": "client-bound: 9 stalls"}]}
    why = probe_met(marked, {"ttft_p95_s": 0.5})
    assert why == "client-bound: 9 stalls"
    d = decide(Bounds(2, 64, 1), {2: True, 4: True, 8: why})
    assert d.done and d.held is None and d.outcome == "stopped: c8 client-bound: 9 stalls"
    short = {"figures": {"ttft_s": {"p95": 0.1}}, "marks": [{"mark": "short", "reason": "short"}]}
    assert probe_met(short, {"ttft_p95_s": 0.5}) is True  # a short probe is never ranked, yet decides


def test_a_stall_the_stack_watch_recorded_marks_the_point_stalled_when_read():
    """run/watch's `stalls` (a process stopped inside the window and recovered) count as marks too."""
    from servesweep.contract.marks import marks_of

    doc = {"figures": {}, "marks": [], "stalls": [{"process": "frontend-0", "start_s": 4.0, "seconds": 5.2,
                                                    "seen": "stopped (state T)"}]}  # fmt: skip
    (mark,) = marks_of(doc)
    assert mark == {"mark": "stalled", "reason": "stalled: frontend-0 stopped (state T) for 5.2 s from 4.0 s after "
                    "aiperf started"}  # fmt: skip
    assert probe_met(doc, {"ttft_p95_s": 0.5}) == mark["reason"]


def test_an_answer_that_stops_mid_stream_with_nothing_else_outstanding_is_a_silence():
    reqs = fx.steady(10) + [fx.request(2.5, 0.05, [0.01] * 5 + [20.0] + [0.01] * 5)]
    (silence,) = trust.silences(trust.profiling(reqs))
    assert silence["at_s"] == pytest.approx(2.6, abs=0.01) and silence["for_s"] == pytest.approx(20.0, abs=0.01)

"""Requests cancelled at the grace boundary are counted apart from errors, and judged by a stated rule."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from servesweep.contract.plan import REPEAT_COOLDOWN_S, Plan
from servesweep.render.loading import load_recipe
from servesweep.render.plan import render
from servesweep.render.recipe import Recipe
from servesweep.run import bench, prefix, repeats, result, server_export

from helpers import CLUSTERS, ROOT, plan_of


def _records(path: Path, completed: int, cancelled: int, errored: int, warmup: int = 3) -> None:
    rows = [{"metadata": {"benchmark_phase": "warmup", "was_cancelled": False}, "metrics": {}}] * warmup
    rows += [{"metadata": {"benchmark_phase": "profiling", "was_cancelled": False}, "metrics": {}}] * completed
    rows += [{"metadata": {"benchmark_phase": "profiling", "was_cancelled": True}, "metrics": {}}] * cancelled
    err = {"metadata": {"benchmark_phase": "profiling", "was_cancelled": False}, "error": {"code": 500}}
    rows += [err] * errored
    path.mkdir(parents=True, exist_ok=True)
    (path / "profile_export.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows) + "{torn line\n")


def _figures(plan: Plan, outcomes: dict | None):
    export = {"request_count": {"avg": 90}, "error_request_count": {"avg": 7}, "output_token_throughput": {"avg": 1.0},
              "total_output_tokens": {"avg": 900}, "is_complete": True}  # fmt: skip
    scrapes = result.Scrapes({}, {}, {}, {}, {}, {})
    return result.figures(plan, export, scrapes, outcomes)


def test_per_request_export_tells_cancellations_from_errors(tmp_path):
    _records(tmp_path, completed=90, cancelled=5, errored=2)
    assert bench.request_outcomes(repeats.request_records(tmp_path)) == {"completed": 90, "cancelled": 5, "errored": 2}
    assert bench.request_outcomes(repeats.request_records(tmp_path / "missing")) is None


@pytest.mark.parametrize(("cancelled", "valid"), [(5, True), (20, False)])
def test_the_gate_allows_a_few_cancellations_but_not_a_cut_short_load(cancelled, valid):
    plan = Plan.from_json(plan_of("local-agg-2x-mocker"))
    assert plan.benchmark.grace_s == 30 and plan.validity["max_cancelled_share"] == 0.1
    f, why = _figures(plan, {"completed": 90, "cancelled": cancelled, "errored": 0})
    assert f["requests_cancelled"] == cancelled and f["requests_errored"] == 0 and f["error_rate"] == 0
    reasons = result.gate(plan, {"is_complete": True}, f, 0)
    assert (reasons == []) is valid, reasons
    if not valid:
        assert "were still running at the grace boundary (30 s after" in reasons[0]


def test_without_the_per_request_export_cancellations_are_unknown():
    plan = Plan.from_json(plan_of("local-agg-2x-mocker"))
    f, why = _figures(plan, None)
    assert f["requests_errored"] == 7 and f["requests_cancelled"] == 0
    assert "cancellations are counted as errors" in why["requests_cancelled"]


def test_grace_is_a_recipe_setting_in_the_plan_aiperf_and_the_time_budget():
    base = plan_of("gemma4-livekit-2tp4-dyn-vllm-prod")["resources"]["point_s"]
    r = load_recipe(ROOT / "recipes" / "gemma4-livekit-2tp4-dyn-vllm-prod.yaml")
    longer = Recipe(r.name, r.source, {**r.doc, "scenario": {**r.doc["scenario"], "grace_s": 1800}})
    plan = render(longer, CLUSTERS["hcm-hgx02"], 96)
    assert plan["benchmark"]["grace_s"] == 1800 and plan["resources"]["point_s"] == base - 30 + 1800
    argv = bench.aiperf_argv(Plan.from_json(plan), _Ctx(), Path("/tmp/a"), [])
    assert argv[argv.index("--benchmark-grace-period") + 1] == "1800"


class _Ctx:
    def resolve(self, template: str, _name: str) -> str:
        return "http://127.0.0.1:1"

    url = resolve


def _gauge(url: str, avg: float, p99: float) -> dict:
    return {"endpoint_url": url, "labels": {"engine": "0"}, "stats": {"avg": avg, "p99": p99}}


def test_batch_and_preemptions_come_from_the_engines_in_aiperfs_server_export():
    """The shape of aiperf 0.13's server_metrics_export.json; a frontend's series is not an engine's."""
    plan = Plan.from_json(plan_of("local-disagg-1p1d-mocker"))
    urls = {"http://n/prefill": "prefill-0", "http://n/decode": "decode-0"}
    doc = {
        "metrics": {
            "vllm:num_requests_running": {
                "series": [
                    _gauge("http://n/prefill", 2.0, 4.0),
                    _gauge("http://n/decode", 30.0, 44.0),
                    _gauge("http://n/frontend", 999.0, 999.0),
                ]
            },
            "vllm:num_preemptions": {"series": [{"endpoint_url": "http://n/decode", "stats": {"total": 3.0}}]},
        },
        "summaries": [{"endpoint_info": {u: {"total_fetches": 40} for u in urls}}],  # each gauge read 40 times
    }
    why: dict = {}
    batch, preempt = server_export.batch_figures(plan, doc, urls, why)
    gauge = {"source": "gauge", "samples": 40}
    assert batch == {"decode": {"mean": 30.0, "p99": 44.0, **gauge}, "prefill": {"mean": 2.0, "p99": 4.0, **gauge}}
    assert preempt == 3 and why == {}
    batch, preempt = server_export.batch_figures(plan, None, urls, why)
    assert batch is None and preempt is None and "no server_metrics_export.json" in why["batch_by_role"]


def _run_export(path: Path, rps: float, ttft_p95_ms: float, count: int) -> None:
    path.mkdir(parents=True, exist_ok=True)
    export = {
        "request_throughput": {"unit": "requests/sec", "avg": rps},
        "time_to_first_token": {"unit": "ms", "avg": ttft_p95_ms / 2, "p95": ttft_p95_ms},
        "output_token_throughput": {"unit": "tokens/sec", "avg": rps * 10},
        "total_token_throughput": {"unit": "tokens/sec", "avg": rps * 100},
        "inter_token_latency": {"unit": "ms", "p50": 10.0, "p99": 20.0},
        "request_count": {"unit": "requests", "avg": count},
        "total_output_tokens": {"unit": "tokens", "avg": count * 10},
        "is_complete": True,
    }
    (path / "profile_export_aiperf.json").write_text(json.dumps(export))
    (path / "profile_export.jsonl").write_text(
        json.dumps({"metadata": {"benchmark_phase": "profiling", "was_cancelled": False}}) + "\n"
    )


def test_repeats_merge_runs_and_keep_each_run_and_the_intervals(tmp_path):
    """aiperf 0.13's --num-profile-runs layout: profile_runs/run_NNNN/ and aggregate/."""
    _run_export(tmp_path / "profile_runs" / "run_0001", 10.0, 200.0, 100)
    _run_export(tmp_path / "profile_runs" / "run_0002", 12.0, 300.0, 120)
    agg = {
        "metadata": {"confidence_level": 0.95, "num_profile_runs": 2},
        "metrics": {
            "request_throughput_avg": {"mean": 11.0, "ci_low": 9.0, "ci_high": 13.0},
            "time_to_first_token_p95": {"mean": 250.0, "ci_low": 150.0, "ci_high": 350.0},
            "total_token_throughput_avg": {"mean": 1100.0, "ci_low": 900.0, "ci_high": 1300.0},
        },
    }
    (tmp_path / "aggregate").mkdir()
    (tmp_path / "aggregate" / "profile_export_aiperf_aggregate.json").write_text(json.dumps(agg))
    runs = repeats.run_exports(tmp_path)
    export = repeats.merged_export(runs)
    assert export["request_throughput"]["avg"] == 11.0 and export["request_count"]["avg"] == 220  # mean; sum
    assert bench.request_outcomes(repeats.request_records(tmp_path)) == {"completed": 2, "cancelled": 0, "errored": 0}
    rep = repeats.figures(tmp_path, runs, gpus=2)
    assert rep["n"] == 2 and [r["req_s"] for r in rep["runs"]] == [10.0, 12.0]
    hw = rep["half_width"]
    assert hw["req_s"] == 2.0 and hw["ttft_p95_s"] == 0.1 and hw["total_tps_per_gpu"] == 100.0
    assert hw["output_tps"] is None  # aiperf gave no interval for it here: unknown, not zero
    one = tmp_path / "profile_runs" / "run_0001"
    assert repeats.figures(one, repeats.run_exports(one), gpus=2) is None  # one run: no repeats


def test_repeats_set_aiperf_runs_and_the_time_budget():
    r = load_recipe(ROOT / "recipes" / "local-agg-2x-mocker.yaml")
    once = render(r, CLUSTERS["local"], 4)
    thrice = render(Recipe(r.name, r.source, {**r.doc, "repeats": 3}), CLUSTERS["local"], 4)
    run = r.doc["scenario"]["duration_s"] + once["benchmark"]["grace_s"]
    assert thrice["resources"]["point_s"] - once["resources"]["point_s"] == 2 * run + 2 * REPEAT_COOLDOWN_S
    argv = bench.aiperf_argv(Plan.from_json(thrice), _Ctx(), Path("/tmp/a"), [])
    assert argv[argv.index("--num-profile-runs") + 1] == "3" and "--confidence-level" in argv
    assert "--num-profile-runs" not in bench.aiperf_argv(Plan.from_json(once), _Ctx(), Path("/tmp/a"), [])


def test_theoretical_prefix_hit_replays_the_sent_requests_through_a_perfect_cache(tmp_path):
    trace = tmp_path / "t.jsonl"
    rows = [
        {"session_id": "a", "input_length": 128, "hash_ids": [1, 2]},
        {"session_id": "a", "input_length": 250, "hash_ids": [1, 2, 3, 4]},
        {"session_id": "b", "input_length": 128, "hash_ids": [1, 9]},
    ]
    trace.write_text("".join(json.dumps(r) + "\n" for r in rows))

    def sent(*reqs):
        lines = [{"metadata": {"request_start_ns": t, "conversation_id": s, "turn_index": k}} for t, s, k in reqs]
        (tmp_path / "profile_export.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))

    ds = {"kind": "trace", "path": str(trace), "block_size": 64}
    sent((1, "a", 0), (2, "a", 1), (3, "b", 0))  # 0 of 128, 128 of 250, 64 of 128 cached
    assert prefix.theoretical_hit(ds, repeats.request_records(tmp_path), {}) == (0 + 128 + 64) / (128 + 250 + 128)
    sent((1, "b", 0), (2, "a", 1))  # order matters: b's block 1 primes a's first block only
    assert prefix.theoretical_hit(ds, repeats.request_records(tmp_path), {}) == 64 / (128 + 250)
    why: dict = {}
    sent((1, "c", 0))
    assert prefix.theoretical_hit(ds, repeats.request_records(tmp_path), why) is None
    assert "not in the trace" in why["theoretical_prefix_hit"]
    assert prefix.theoretical_hit({"kind": "synthetic"}, [], why) is None

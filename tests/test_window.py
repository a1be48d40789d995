"""Server-side figures over the profiling window only (run/window) and the batch from the engines'
own counters (run/server_export), on fixture exports in aiperf 0.13's server_metrics_export.json shape."""

from __future__ import annotations

import json

from servesweep.contract.plan import Plan
from servesweep.run import server_export, window

from helpers import plan_of


def _series(url: str, stats: dict, labels: dict | None = None, buckets: dict | None = None) -> dict:
    return {"endpoint_url": url, "labels": labels or {}, "stats": stats, **({"buckets": buckets} if buckets else {})}


def test_agentic_warm_up_is_excluded_from_per_worker_counts_and_server_ttft():
    """An AgentX rehearsal (agentic cache warm-up): the scrapes around aiperf count 1 282 requests per
    role, 1 128 of them warm-up, and a server TTFT above the client's; the result counts the 154 profiled
    (each role sees every request once), and the gap comes out positive."""
    plan = Plan.from_json(plan_of("dsv4-pro-gb300-1p1d-pdep8-ddep8-mtp", rehearsal=True))
    assert plan.benchmark.warmup.get("agentic_cache_s")
    engines = [p.name for p in plan.processes if p.is_engine and not p.headless]
    assert engines == ["prefill-0-n0", "prefill-0-n1", "decode-0-n0", "decode-0-n1"]
    urls = {f"http://n/{n}": n for n in [*engines, *plan.frontends]}
    counter, ttft = plan.server_metrics["worker_requests"], plan.server_metrics["ttft"]
    assert ttft["source"] == "frontends"
    fe, name = f"http://n/{plan.frontends[0]}", window.exported_name(counter["metric"])  # a counter by its family
    scraped = {"prefill-0-n0": 700, "prefill-0-n1": 582, "decode-0-n0": 640, "decode-0-n1": 642}
    during = {"prefill-0-n0": 600.0, "prefill-0-n1": 528.0, "decode-0-n0": 560.0, "decode-0-n1": 568.0}
    doc = {
        "metrics": {
            name: {"series": [_series(f"http://n/{n}", {"total": 77.0}, counter["labels"]) for n in engines]},
            ttft["histogram"]: {
                "series": [_series(fe, {"count": 154, "sum": 154 * 0.25}, buckets={"0.1": 10, "0.5": 154, "+Inf": 154})]
            },
        },
        "warmup_metrics": {
            name: {"series": [_series(f"http://n/{n}", {"total": v}, counter["labels"]) for n, v in during.items()]
                   + [_series(f"http://n/{engines[0]}", {"total": 999.0}, {"other": "x"})]},  # other label: ignored
            "dynamo_frontend_requests": {"series": [_series(fe, {"total": 1100.0}, {"status": "success"}),
                                                    _series(fe, {"total": 28.0}, {"status": "error"})]},
        },
    }  # fmt: skip

    def scraped_figs() -> dict:
        return {
            "requests_per_worker": dict(scraped),  # the scrapes: warm-up included
            "requests_per_frontend": {plan.frontends[0]: 1282},
            "server_ttft_s": {"mean": 0.54, "p50": 0.5, "p95": 0.9},
            "client_ttft_mean_s": 0.364,
            "ttft_gap_s": 0.364 - 0.54,
            "cache_read_share": None,
        }

    figs, why = scraped_figs(), {}
    notes = window.apply(plan, doc, urls, figs, why, 1128)
    assert figs["requests_per_worker"] == {
        "prefill-0-n0": 100,
        "prefill-0-n1": 54,
        "decode-0-n0": 80,
        "decode-0-n1": 74,
    }
    assert figs["requests_per_frontend"] == {plan.frontends[0]: 154}
    assert figs["server_ttft_s"]["mean"] == 0.25 and 0.1 < figs["server_ttft_s"]["p50"] <= 0.5
    assert abs(figs["ttft_gap_s"] - (0.364 - 0.25)) < 1e-9 and figs["ttft_gap_s"] > 0
    assert "less the 1128 warm-up requests" in notes["requests_per_worker"]
    assert "warm-up excluded" in notes["requests_per_frontend"] and "warm-up excluded" in notes["server_ttft_s"]
    # warm-up requests aiperf does not list (or no warm-up counters): the profiling window's own counts
    figs = scraped_figs()
    notes = window.apply(plan, doc, urls, figs, why, 0)
    assert (
        figs["requests_per_worker"] == {n: 77 for n in engines}
        and "profiling window only" in notes["requests_per_worker"]
    )
    # nothing from the window: the scraped counts stay, said to include warm-up, and no gap from a warm TTFT
    figs = scraped_figs()
    notes = window.apply(plan, {"metrics": {}}, urls, figs, why, None)
    assert figs["requests_per_worker"] == scraped and "warm-up included" in notes["requests_per_worker"]
    assert figs["ttft_gap_s"] is None and "warm-up included" in why["ttft_gap_s"] + notes["server_ttft_s"]


def test_without_a_warm_up_the_scraped_counts_are_exact_and_kept():
    plan = Plan.from_json(
        {
            **plan_of("local-agg-2x-vllm-cpu"),
            "benchmark": {**plan_of("local-agg-2x-vllm-cpu")["benchmark"], "warmup": {}},
        }
    )
    figs = {"requests_per_worker": {"agg-0": 35, "agg-1": 35}, "requests_per_frontend": {}, "cache_read_share": None,
            "server_ttft_s": {"mean": 0.2, "p50": 0.2, "p95": 0.3}, "client_ttft_mean_s": 0.3}  # fmt: skip
    notes = window.apply(plan, {"metrics": {}}, {}, figs, {}, 0)
    assert (
        figs["requests_per_worker"] == {"agg-0": 35, "agg-1": 35} and "no warm-up ran" in notes["requests_per_worker"]
    )


def test_batch_comes_from_the_engines_busy_time_counters_with_their_sample_count():
    """Little's law: 2 engines busy 0.56 and 0.44 request-seconds per second -> mean batch 0.5,
    over the 70 requests they counted; the gauge (mean 0.125) gives only the p99."""
    plan = Plan.from_json(plan_of("local-agg-2x-vllm-cpu"))
    engines = [p.name for p in plan.processes if p.is_engine and not p.headless]
    assert len(engines) == 2
    urls = {f"http://n/{n}": n for n in engines}
    gauge = plan.server_metrics["batch"]["running"]
    busy = [{"count": 40, "sum": 11.2, "sum_rate": 0.56}, {"count": 30, "sum": 8.8, "sum_rate": 0.44}]
    busy_name = server_export.BUSY_HISTOGRAMS[0][0]  # vLLM's time in the running batch
    doc = {
        "metrics": {
            busy_name: {"series": [_series(u, s) for u, s in zip(urls, busy, strict=True)]},
            gauge: {"series": [_series(u, {"avg": 0.125, "p99": 2.0}) for u in urls]},
        }
    }
    why: dict = {}
    batch, _ = server_export.batch_figures(plan, doc, urls, why)
    assert batch == {"agg": {"mean": 0.5, "p99": 2.0, "source": "counters", "samples": 70}}
    # two runs (repeats): each engine's mean over its runs, every run's requests counted
    doc["metrics"][busy_name]["series"] += [_series(u, s) for u, s in zip(urls, busy, strict=True)]
    batch, _ = server_export.batch_figures(plan, doc, urls, why)
    assert batch == {"agg": {"mean": 0.5, "p99": 2.0, "source": "counters", "samples": 140}}
    # only the gauge, read 16 times over the window: no figure, and the reason says how often
    del doc["metrics"][busy_name]
    doc["summaries"] = [{"endpoint_info": {u: {"total_fetches": 16} for u in urls}}]
    batch, _ = server_export.batch_figures(plan, doc, urls, why)
    assert (
        batch is None
        and f"read 16 time(s) over the window, fewer than {server_export.MIN_GAUGE_SAMPLES}" in why["batch_by_role"]
    )


def _record(session: str, turn: int, t: int) -> dict:
    return {"metadata": {"conversation_id": session, "turn_index": turn, "request_start_ns": t}}


def test_the_warm_cache_theoretical_hit_of_a_two_point_stack_equals_a_hand_computation(tmp_path):
    """Trace: session a = blocks [1,2] then [1,2,3]; session b = [1,4]. Block 100 tokens, prompts full.
    Point 1 sends a0, a1: hits 0 + 200 of 500 = 0.4 (cold). Point 2 on the same stack sends b0 and
    a0: with the cache point 1 left ({1,2,3}), b0 hits 100 of 200 and a0 200 of 200: 300 / 400 = 0.75
    (a cold cache would give 0 + 100 of 400 = 0.25)."""
    from servesweep.run import prefix

    trace = tmp_path / "t.jsonl"
    rows = [("a", [1, 2]), ("a", [1, 2, 3]), ("b", [1, 4])]
    trace.write_text(
        "".join(json.dumps({"session_id": s, "input_length": 100 * len(h), "hash_ids": h}) + "\n" for s, h in rows)
    )
    ds = {"kind": "trace", "path": str(trace), "block_size": 100}
    why: dict = {}
    warm = prefix.load_warm(tmp_path / "sent.json")
    assert prefix.cache_note(len(warm)).startswith("cold cache")
    assert prefix.theoretical_hit(ds, [_record("a", 0, 1), _record("a", 1, 2)], why, warm) == 0.4
    prefix.save_warm(tmp_path / "sent.json", warm)
    second = [_record("b", 0, 3), _record("a", 0, 4)]
    assert prefix.theoretical_hit(ds, second, why) == 0.25  # cold
    warm = prefix.load_warm(tmp_path / "sent.json")
    assert prefix.cache_note(len(warm)).startswith("warm cache: starts with the 3 blocks")
    assert prefix.theoretical_hit(ds, second, why, warm) == 0.75 and why == {}


def test_the_theoretical_hit_reads_a_weka_folder_and_says_plainly_why_not_for_the_pinned_corpus(tmp_path):
    from servesweep.run import prefix

    (tmp_path / "w").mkdir()
    traj = {"id": "t0", "block_size": 64, "hash_id_scope": "local", "requests": [
        {"in": 128, "hash_ids": [0, 1]}, {"in": 192, "hash_ids": [0, 1, 2]}]}  # fmt: skip
    (tmp_path / "w" / "t0.json").write_text(json.dumps(traj))
    why: dict = {}
    ds = {"kind": "trace", "format": "weka", "path": str(tmp_path / "w")}
    assert prefix.theoretical_hit(ds, [_record("t0", 0, 1), _record("t0", 1, 2)], why) == 128 / 320
    # aiperf names a trajectory's replayed chain trace::chain
    assert prefix.theoretical_hit(ds, [_record("t0::c0", 0, 1), _record("t0::c0", 1, 2)], why) == 128 / 320
    prefix.theoretical_hit({"kind": "public", "name": "semianalysis_cc_traces_weka_062126"}, [], why)
    assert "pinned corpus semianalysis_cc_traces_weka_062126" in why["theoretical_prefix_hit"]
    assert "synthetic" not in why["theoretical_prefix_hit"]


def test_an_evals_questions_copy_is_part_of_its_settings_digest(tmp_path):
    """A new prepared copy of the questions changes what the eval's result must record (it reruns)."""
    import os

    from servesweep.checks.evaldata import eval_data
    from servesweep.contract import paths
    from servesweep.workflow.why import _eval_settings_digest

    home = tmp_path / "hf"
    assert eval_data(home, "gsm8k", None) == {"main": None}  # not in this host's cache
    old = home / "datasets/openai___gsm8k/main/0.0.0/aaa/dataset_info.json"
    old.parent.mkdir(parents=True)
    old.write_text("{}")
    os.utime(old, (1, 1))
    assert eval_data(home, "gsm8k", None) == {"main": "0.0.0/aaa"}
    new = home / "datasets/openai___gsm8k/main/0.0.0/bbb/dataset_info.json"
    new.parent.mkdir(parents=True)
    new.write_text("{}")
    assert eval_data(home, "gsm8k", None) == {"main": "0.0.0/bbb"}  # the newest, as the datasets library picks it
    settings = {"n_shots": 0}
    settings_file = tmp_path / paths.eval_settings_file("r", "gsm8k")
    settings_file.parent.mkdir(parents=True)
    digests = []
    for data in ({"main": "0.0.0/aaa"}, {"main": "0.0.0/bbb"}):
        settings_file.write_text(json.dumps({"benchmark": "gsm8k", "n_shots": 0, "data": data}))
        digests.append(_eval_settings_digest(tmp_path, "r", "gsm8k", settings))
    assert digests[0] != digests[1]

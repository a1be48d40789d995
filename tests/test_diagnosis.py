"""The diagnosis line: what a point's load ran out of, from the engine gauges its result kept."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from servesweep.contract.plan import Plan
from servesweep.report.capacity import CAPACITY_HEADERS, capacity_rows
from servesweep.report.diagnosis import diagnose, lowest_miss_line
from servesweep.report.summary import scenario_table
from servesweep.run import engine_load
from servesweep.run.result import validate_result
from servesweep.tools.samples import result_doc

from helpers import plan_of


def _gauge(mean: float, peak: float, key: str = "p99", engines: int = 2) -> dict:
    return {"mean": mean, key: peak, "engines": engines}


def _loaded(conc: int = 16, *, in_flight=None, waiting=None, kv=None, cap=None, prefill=None, **figs) -> dict:
    doc = result_doc("r", conc, 0.3, 1000.0)
    load = {"batch_cap": cap, "in_flight": in_flight, "waiting": waiting, "kv_cache_use": kv, "prefill_share": prefill}
    doc["figures"] |= {"engine_load": load, **figs}
    assert validate_result(doc) == []
    return doc


def test_requests_waiting_below_an_unknown_cap_are_queue_bound():
    d = diagnose(_loaded(64, in_flight=_gauge(8.0, 8.0), waiting=_gauge(56.0, 60.0), kv=_gauge(0.3, 0.4, "max")))
    assert d.bound == "queue-bound"
    assert "56 requests waiting on average (p99 60)" in d.because and "ran 8 at once" in d.because
    assert "batch cap unknown" in d.because


def test_a_batch_held_at_its_cap_with_a_queue_is_batch_cap_bound():
    doc = _loaded(
        64, in_flight=_gauge(8.0, 8.0), waiting=_gauge(55.0, 58.0), cap={"agg": 4},
        batch_by_role={"agg": {"mean": 3.9, "p99": 4.0}},
    )  # fmt: skip
    d = diagnose(doc)
    assert d.bound == "batch-cap-bound"
    assert "agg batch 3.9 of cap 4 (p99 4)" in d.because and "55 requests waiting" in d.because


def test_engines_holding_far_less_than_the_concurrency_with_no_queue_is_client_bound():
    d = diagnose(_loaded(64, in_flight=_gauge(12.5, 20.0), waiting=_gauge(0.0, 0.0)))
    assert d.bound == "client-bound"
    assert "ran 12.5 and queued 0 requests on average of the 64 the client keeps in flight" in d.because


def test_client_ttft_far_above_the_servers_is_client_bound():
    doc = _loaded(16, in_flight=_gauge(16.0, 16.0), waiting=_gauge(0.0, 0.0), client_ttft_mean_s=0.4, ttft_gap_s=0.3)
    d = diagnose(doc)
    assert d.bound == "client-bound" and "client TTFT 400 ms is 300 ms above the server's" in d.because


def test_a_full_kv_cache_or_preemptions_is_kv_cache_bound():
    d = diagnose(_loaded(in_flight=_gauge(16.0, 16.0), waiting=_gauge(9.0, 12.0), kv=_gauge(0.9, 0.99, "max")))
    assert d.bound == "KV-cache-bound" and "99% full at peak (mean 90%)" in d.because
    d = diagnose(_loaded(in_flight=_gauge(16.0, 16.0), waiting=_gauge(0.0, 0.0), preemptions=7))
    assert d.line == "KV-cache-bound: 7 preemptions"


def test_a_queue_behind_prefill_is_prefill_bound():
    d = diagnose(_loaded(in_flight=_gauge(16.0, 16.0), waiting=_gauge(4.0, 9.0), prefill=0.7))
    assert d.bound == "prefill-bound" and "prefill took 70% of the engines' request time" in d.because


def test_every_request_running_with_room_left_is_not_saturated():
    d = diagnose(_loaded(16, in_flight=_gauge(15.5, 16.0), waiting=_gauge(0.0, 0.0), kv=_gauge(0.1, 0.2, "max")))
    assert d.bound == "not saturated"
    assert d.because == "the engines ran 15.5 of the client's 16 at once, none waiting, KV cache at most 20%"


def test_without_the_gauges_the_bound_is_said_to_be_unknown():
    doc = result_doc("r", 16, 0.3, 1000.0)  # a result from before the engine-load figures
    assert diagnose(doc).bound == "unknown"
    doc = _loaded()
    doc["figures"]["engine_load"] = None
    doc["unmeasured"]["engine_load"] = "aiperf wrote no server_metrics_export.json"
    assert diagnose(doc).line == "unknown: aiperf wrote no server_metrics_export.json"
    assert diagnose(_loaded()).line == "unknown: the engines export neither a waiting nor a running gauge"


def _series(url: str, **stats) -> dict:
    return {"endpoint_url": url, "labels": {}, "stats": stats}


def test_engine_load_reads_the_engines_gauges_and_the_plans_batch_cap():
    plan = Plan.from_json(plan_of("local-agg-2x-mocker"))
    capped = [dataclasses.replace(p, argv=(*p.argv, "--max-num-seqs", "4")) if p.role == "agg" else p
              for p in plan.processes]  # fmt: skip
    plan = dataclasses.replace(plan, processes=tuple(capped))
    urls = {"http://n/a0": "agg-0", "http://n/a1": "agg-1"}
    doc = {
        "metrics": {
            "vllm:num_requests_running": {"series": [_series("http://n/a0", avg=4.0, p99=4.0),
                                                     _series("http://n/a1", avg=3.5, p99=4.0),
                                                     _series("http://n/frontend", avg=99.0, p99=99.0)]},
            "vllm:num_requests_waiting": {"series": [_series("http://n/a0", avg=10.0, p99=14.0),
                                                     _series("http://n/a1", avg=6.0, p99=11.0)]},
            "vllm:request_prefill_time_seconds": {"series": [_series("http://n/a0", sum=3.0, count=10)]},
            "vllm:request_decode_time_seconds": {"series": [_series("http://n/a0", sum=9.0, count=10)]},
        }
    }  # fmt: skip
    why: dict = {}
    load = engine_load.figures(plan, doc, urls, why)
    assert load["batch_cap"] == {"agg": 4}
    assert load["in_flight"] == {"mean": 7.5, "p99": 4.0, "engines": 2}
    assert load["waiting"] == {"mean": 16.0, "p99": 14.0, "engines": 2}
    assert load["kv_cache_use"] is None and "vllm:kv_cache_usage_perc" in why["engine_load.kv_cache_use"]
    assert load["prefill_share"] == pytest.approx(0.25)
    assert engine_load.figures(plan, None, urls, why) is None and "no server_metrics_export" in why["engine_load"]


def test_the_summary_and_the_capacity_table_name_the_bound(tmp_path):
    doc = _loaded(64, in_flight=_gauge(8.0, 8.0), waiting=_gauge(56.0, 60.0))
    path = tmp_path / "c64.json"
    path.write_text(json.dumps(doc))
    from servesweep.report.summary import load_results

    table = scenario_table(load_results([path], {}), tmp_path)
    assert "queue-bound: 56 requests waiting" in table
    capacity = {"lowest_miss": 64, "probes": [{"concurrency": 64, "result": str(path)}]}
    assert lowest_miss_line(capacity).startswith("c64: queue-bound: 56 requests waiting")
    search = {"scenario": "s", "recipe": "r", "slo": {"ttft_p95_s": 0.5}, "capacity": 32, "outcome": "found",
              "at_capacity": None, "lowest_miss": 64, "probes": [{"concurrency": 64, "result": str(path)}]}  # fmt: skip
    row = capacity_rows([search])[0]
    assert CAPACITY_HEADERS[-1] == "lowest miss ran out of" and row[-1].startswith("c64: queue-bound: 56 requests")
    assert lowest_miss_line({"lowest_miss": None, "probes": []}) == "–"
    gone = {"lowest_miss": 64, "probes": [{"concurrency": 64, "result": str(Path(tmp_path / "gone.json"))}]}
    assert lowest_miss_line(gone).startswith("c64: unknown: ")

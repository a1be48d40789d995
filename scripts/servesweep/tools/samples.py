"""Synthetic result documents in the result schema's shape, for summary tests and benches."""

from __future__ import annotations

from ..contract import paths
from ..render.kinds.dynamo_mocker import KIND as SAMPLE_KIND  # what the local sweep's samples ran


def _figures(conc, ttft_p95, tps, gpus, workers, errors) -> dict:
    return {
        "requests_completed": 1000 * conc,
        "requests_errored": errors,
        "requests_cancelled": conc // 4,
        "cancelled_share": (conc // 4) / (1000 * conc + errors + conc // 4),
        "batch_by_role": {"agg": {"mean": conc * 0.8, "p99": float(conc)}},
        "preemptions": 0,
        "error_rate": errors / (1000 * conc + errors),
        "request_throughput": tps / 50,
        "ttft_s": {"p50": ttft_p95 / 3, "p90": ttft_p95 / 1.5, "p95": ttft_p95, "p99": ttft_p95 * 1.6},
        "itl_ms": {"p50": 10.0 + conc / 10, "p90": 14.0, "p99": 20.0 + conc},
        "request_latency_s": {"p50": 1.0, "p99": 2.0},
        "output_tps": tps,
        "total_tps": tps * 10,
        "output_tps_per_gpu": tps / gpus,
        "total_tps_per_gpu": tps * 10 / gpus,
        "output_tps_per_user": tps / conc,
        "output_tokens_total": tps * 60,
        "benchmark_duration_s": 60.0,
        "cache_read_share": 0.5,
        "requests_per_worker": workers or {"agg-0": 600 * conc, "agg-1": 400 * conc},
        "requests_per_frontend": {"frontend": 1000 * conc + errors},
        "server_ttft_s": {"mean": ttft_p95 / 2, "p50": ttft_p95 / 3, "p95": ttft_p95},
        "client_ttft_mean_s": ttft_p95 / 2 + 0.01,
        "ttft_gap_s": 0.01,
    }


def result_doc(recipe, conc, ttft_p95, tps, gpus=2, scenario="chat", workers=None, errors=0):
    return {
        "schema": "servesweep.result/3",
        "identity": {
            "recipe": recipe,
            "concurrency": conc,
            "point": conc,
            "cluster": "local",
            "run_cluster": "local",
            "rehearsal": False,
            "plan_fingerprint": f"{abs(hash((recipe, conc))) % 16**16:016x}",
            "curve_fingerprint": f"{abs(hash(recipe)) % 16**16:016x}",
            "image": "registry/x:1" if "img" in recipe else None,
            "engine": SAMPLE_KIND.name,
            "recipe_engine": SAMPLE_KIND.name,
            "model": "m",
            "scenario": scenario,
            "aiperf_scenario": None,
            "request_plane_tls": True,
            "topology": {"kind": "aggregated", "gpus": gpus, "nodes": 1, "processes": 3, "replicas": 2},
            "discovery": "file",
            "stack": {
                "id": f"stack-{recipe}",
                "position": 1,
                "startup_s": 30.0,
                "caches_reset": False,
                "caches_reset_note": "first point on a fresh stack: nothing cached yet",
            },
            "job_id": "local-1",
            "hosts": ["localhost"],
            "start_time": "2026-12-01T00:00:00+00:00",
            "end_time": "2026-12-01T00:01:00+00:00",
            "tools": {"aiperf": "0.13.0", "engine": "ai-dynamo 1.6.1", "servesweep": None},
        },
        "figures": _figures(conc, ttft_p95, tps, gpus, workers, errors),
        "unmeasured": {},
        "counting": {},
        "timings_s": {"bench": 60.0},
        "artifacts": str(paths.run_dir("x", 2)),
        "logs": {"tracebacks": 0, "fatal": 0, "by_process": {}, "expected": {}, "missing": [], "clean": True},
    }

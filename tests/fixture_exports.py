"""aiperf artifacts written by hand, in aiperf 0.13's shapes: the per-request export
(profile_export.jsonl: metadata with wall-clock ns, metrics in display units) and its log."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np

T0_NS = 1_780_000_000 * 10**9  # a wall-clock start, in ns


def request(start_s: float, ttft_s: float, gaps_s: list[float], phase: str = "profiling") -> dict:
    """One answered request: its first chunk ``ttft_s`` after it started, then one chunk per gap (a
    chunk per token). ``gaps_s`` empty with several tokens is an answer read in one chunk."""
    tokens = len(gaps_s) + 1
    latency = ttft_s + sum(gaps_s)
    start = T0_NS + int(start_s * 1e9)
    metrics = {
        "time_to_first_token": {"value": ttft_s * 1000, "unit": "ms"},
        "request_latency": {"value": latency * 1000, "unit": "ms"},
        "output_sequence_length": {"value": tokens, "unit": "tokens"},
        "http_req_chunks_received": {"value": len(gaps_s) + 1, "unit": "count"},
        "inter_chunk_latency": {"value": [g * 1000 for g in gaps_s], "unit": "ms"},
    }
    if gaps_s:  # aiperf's per-request ITL and the per-user rate it derives from it
        itl_ms = 1000 * sum(gaps_s) / len(gaps_s)
        metrics["inter_token_latency"] = {"value": itl_ms, "unit": "ms"}
        metrics["output_token_throughput_per_user"] = {"value": 1000 / itl_ms, "unit": "tokens/sec/user"}
    meta = {"benchmark_phase": phase, "was_cancelled": False, "request_start_ns": start,
            "request_end_ns": start + int(latency * 1e9)}  # fmt: skip
    return {"metadata": meta, "metrics": metrics}


def one_chunk(start_s: float, latency_s: float, tokens: int) -> dict:
    """An answer whose every token arrived at once: TTFT is the whole latency, one chunk."""
    rec = request(start_s, latency_s, [])
    rec["metrics"]["output_sequence_length"]["value"] = tokens
    rec["metrics"]["inter_chunk_latency"]["value"] = [0.0] * (tokens - 1)
    rec["metrics"]["inter_token_latency"] = {"value": 0.0, "unit": "ms"}
    return rec


def steady(n: int, every_s: float = 0.2, ttft_s: float = 0.05, tokens: int = 10, gap_s: float = 0.01) -> list[dict]:
    """``n`` requests streamed token by token, one started every ``every_s``."""
    return [request(i * every_s, ttft_s, [gap_s] * (tokens - 1)) for i in range(n)]


def summary_export(records: list[dict]) -> dict:
    """aiperf's summary export (profile_export_aiperf.json) of these records, computed as aiperf does:
    numpy's linear percentiles over the profiled requests, rates over their span."""
    done = [r for r in records if r["metadata"]["benchmark_phase"] == "profiling"]

    def stats(name: str) -> dict:
        vals = [r["metrics"][name]["value"] for r in done if name in r["metrics"]]
        if not vals:
            return {}
        return {"avg": float(np.mean(vals))} | {f"p{q}": float(np.percentile(vals, q)) for q in (50, 90, 95, 99)}

    span = max(r["metadata"]["request_end_ns"] for r in done) - min(r["metadata"]["request_start_ns"] for r in done)
    tokens = sum(r["metrics"]["output_sequence_length"]["value"] for r in done)
    return {
        "request_count": {"avg": len(done)}, "request_throughput": {"avg": len(done) / (span / 1e9)},
        "time_to_first_token": stats("time_to_first_token"), "inter_token_latency": stats("inter_token_latency"),
        "request_latency": stats("request_latency"), "output_token_throughput": {"avg": tokens / (span / 1e9)},
        "total_token_throughput": {"avg": 10 * tokens / (span / 1e9)},
        "output_token_throughput_per_user": stats("output_token_throughput_per_user"),
        "total_output_tokens": {"avg": tokens}, "benchmark_duration": {"avg": span / 1e9}, "is_complete": True,
    }  # fmt: skip


def write(artifacts: Path, records: list[dict], stalls_ms: list[float] = (), export: dict | None = None) -> Path:
    """The artifact dir: per-request export, aiperf's log with an event-loop warning per stall (inside
    the window), and its summary export."""
    artifacts.mkdir(parents=True, exist_ok=True)
    (artifacts / "profile_export.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    logs = artifacts / "logs"
    logs.mkdir(exist_ok=True)
    lines = ["2026-01-01 00:00:00.000 - aiperf.x - INFO - starting (before the window)"]
    first = min(r["metadata"]["request_start_ns"] for r in records) / 1e9 if records else time.time()
    for i, ms in enumerate(stalls_ms):
        at = first + 0.5 + 0.1 * i
        stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(at)) + f".{int(at * 1000) % 1000:03d}"
        lines.append(f"{stamp} - aiperf.common.event_loop_monitor - WARNING - Event loop for worker_0 is taking too "
                     f"long to run. Overhead: {ms:,.2f}ms")  # fmt: skip
    (logs / "aiperf.log").write_text("\n".join(lines) + "\n")
    if export is not None:
        (artifacts / "profile_export_aiperf.json").write_text(json.dumps(export))
    return artifacts

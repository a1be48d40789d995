"""A result's figures against a recipe's SLO (no pandas: the workflow's capacity search uses it too)."""

from __future__ import annotations

SLO_FIGURES = {
    "ttft_p50_s": ("ttft_s", "p50"),
    "ttft_p90_s": ("ttft_s", "p90"),
    "ttft_p95_s": ("ttft_s", "p95"),
    "ttft_p99_s": ("ttft_s", "p99"),
    "itl_p50_ms": ("itl_ms", "p50"),
    "itl_p99_ms": ("itl_ms", "p99"),
    "request_latency_p99_s": ("request_latency_s", "p99"),
}


def slo_verdicts(slo: dict, f: dict) -> dict:
    """A result's figures against an SLO: the recipe's current one, so an SLO edit needs no rerun."""
    verdicts = []
    for key, limit in sorted(slo.items()):
        group, q = SLO_FIGURES[key]
        value = f[group][q]
        verdicts.append({"slo": key, "limit": limit, "value": value, "met": value is not None and value <= limit})
    return {"verdicts": verdicts, "met": all(v["met"] for v in verdicts) if verdicts else None}

"""A point measured K times on one stack (recipe ``repeats``): aiperf's ``--num-profile-runs``
writes ``profile_runs/run_NNNN/`` (each a full export) and ``aggregate/`` (mean and confidence
interval of every metric across runs). The point's headline figures are the runs' means."""

from __future__ import annotations

import json
from pathlib import Path

from ..contract.figures import per_gpu

CONFIDENCE = 0.95
COUNTS = ("request_count", "error_request_count", "total_output_tokens", "total_isl", "total_osl")
# result figure -> (aggregate metric, stat, scale to the figure's unit)
HEADLINE = {
    "req_s": ("request_throughput", "avg", 1.0),
    "ttft_p95_s": ("time_to_first_token", "p95", 0.001),
    "itl_p50_ms": ("inter_token_latency", "p50", 1.0),
    "itl_p99_ms": ("inter_token_latency", "p99", 1.0),
    "output_tps": ("output_token_throughput", "avg", 1.0),
    "total_tps": ("total_token_throughput", "avg", 1.0),
}


def run_dirs(artifact_dir: Path) -> list[Path]:
    """The directories holding one aiperf run's export each (just the artifact dir without repeats)."""
    runs = sorted((artifact_dir / "profile_runs").glob("run_*"))
    return runs or [artifact_dir]


def _read(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except ValueError as e:
        return {"_unreadable": str(e)}


def run_exports(artifact_dir: Path) -> list[dict]:
    """aiperf's export of each run, read once per point."""
    return [_read(d / "profile_export_aiperf.json") for d in run_dirs(artifact_dir)]


def request_records(artifact_dir: Path) -> list[dict] | None:
    """Every record of aiperf's per-request export over all runs, parsed once per point (None: no export)."""
    records = []
    try:
        for d in run_dirs(artifact_dir):
            for line in (d / "profile_export.jsonl").read_text().splitlines():
                try:
                    records.append(json.loads(line))
                except ValueError:
                    continue
    except OSError:
        return None
    return records


def merged_export(exports: list[dict]) -> dict:
    """One export for the point: the single run's, or every run's statistics averaged and their
    request and token counts summed (the server counters span all runs too)."""
    if len(exports) == 1 or any(not e or "_unreadable" in e for e in exports):
        return exports[0] if len(exports) == 1 else next(e for e in exports if not e or "_unreadable" in e)
    merged = dict(exports[0])
    for key, first in exports[0].items():
        if isinstance(first, dict) and all(isinstance(v, (int, float)) for k, v in first.items() if k != "unit"):
            combine = sum if key in COUNTS else (lambda xs: sum(xs) / len(xs))
            stats = {k: combine([e.get(key, {}).get(k, 0) for e in exports]) for k in first if k != "unit"}
            merged[key] = {**first, **stats}
    merged["was_cancelled"] = any(e.get("was_cancelled") for e in exports)
    merged["is_complete"] = all(e.get("is_complete", True) for e in exports)
    merged["error_summary"] = [s for e in exports for s in e.get("error_summary") or []]
    return merged


def figures(artifact_dir: Path, exports: list[dict], gpus: int) -> dict | None:
    """The result's ``repeats``: each run's headline figures (``exports``: ``run_exports``) and half
    of each confidence interval."""
    if len(exports) < 2:
        return None
    agg = _read(artifact_dir / "aggregate" / "profile_export_aiperf_aggregate.json")
    metrics, meta = agg.get("metrics") or {}, agg.get("metadata") or {}
    half = {}
    for fig, (metric, stat, scale) in HEADLINE.items():
        m = metrics.get(f"{metric}_{stat}")
        ok = isinstance(m, dict) and m.get("ci_low") is not None and m.get("ci_high") is not None
        half[fig] = (m["ci_high"] - m["ci_low"]) / 2 * scale if ok else None
    half |= per_gpu(half, gpus)
    per_run = [{fig: _stat(e, metric, stat, scale) for fig, (metric, stat, scale) in HEADLINE.items()} for e in exports]
    level = meta.get("confidence_level", CONFIDENCE)
    return {"n": len(exports), "confidence_level": level, "runs": per_run, "half_width": half}


def _stat(export: dict, metric: str, stat: str, scale: float):
    v = (export.get(metric) or {}).get(stat) if isinstance(export.get(metric), dict) else None
    return None if v is None else v * scale

"""Figures from aiperf's server-metrics export: the engines' own gauges and counters, sampled by
aiperf over the profiling phase (``server_metrics_export.json``), attributed to plan processes."""

from __future__ import annotations

import json
from pathlib import Path

from ..contract.plan import Plan
from .repeats import run_dirs


def read(artifact_dir: Path) -> dict | None:
    """The export of the point's run; with repeats, every run's series together."""
    docs = []
    for d in run_dirs(artifact_dir):
        try:
            docs.append(json.loads((d / "server_metrics_export.json").read_text()))
        except (OSError, ValueError):
            return None
    metrics: dict[str, dict] = {}
    for doc in docs:
        for name, m in (doc.get("metrics") or {}).items():
            metrics.setdefault(name, {"series": []})["series"] += m.get("series") or []
    return {"metrics": metrics}


def _series(doc: dict, metric: str, url_to_process: dict[str, str]) -> list[tuple[str, dict]]:
    """(process, stats) of each series of ``metric`` scraped from one of the plan's engines."""
    out = []
    for s in ((doc.get("metrics") or {}).get(metric) or {}).get("series", []):
        name = url_to_process.get(s.get("endpoint_url", ""))
        if name is not None and isinstance(s.get("stats"), dict):
            out.append((name, s["stats"]))
    return out


def batch_figures(plan: Plan, doc: dict | None, url_to_process: dict[str, str], why: dict) -> tuple:
    """(running batch per role {role: {mean, p99}}, preemptions over the run). Each series is one
    engine (a DP rank has its own): the role's mean is the mean of its engines' means, its p99 the
    largest engine p99."""
    spec = plan.server_metrics["batch"]
    if spec is None:
        why["batch_by_role"] = why["preemptions"] = f"{plan.engine} exports no running-requests gauge here"
        return None, None
    if doc is None:
        why["batch_by_role"] = why["preemptions"] = "aiperf wrote no server_metrics_export.json"
        return None, None
    role_of = {p.name: p.role for p in plan.processes}
    by_role: dict[str, list[dict]] = {}
    for name, stats in _series(doc, spec["running"], url_to_process):
        by_role.setdefault(role_of[name], []).append(stats)
    batch = {
        role: {"mean": sum(s.get("avg") or 0.0 for s in st) / len(st), "p99": max(s.get("p99") or 0.0 for s in st)}
        for role, st in sorted(by_role.items())
    } or None
    if batch is None:
        why["batch_by_role"] = f"no {spec['running']} series from the engines in aiperf's export"
    preempt = None
    if spec["preemptions"] is None:
        why["preemptions"] = f"{plan.engine} exports no preemption counter"
    else:
        totals = [s.get("total") for _, s in _series(doc, spec["preemptions"], url_to_process)]
        preempt = int(sum(t for t in totals if t is not None)) if totals else None
        if preempt is None:
            why["preemptions"] = f"no {spec['preemptions']} series from the engines in aiperf's export"
    return batch, preempt


def spec_decode_figures(plan: Plan, doc: dict | None, url_to_process: dict[str, str], why: dict) -> dict | None:
    """Speculative decoding over the profiling phase, from the engines' own counters in aiperf's export:
    drafts, drafted and accepted tokens, and the mean acceptance length 1 + accepted / drafts (the
    tokens one verification step yields). None, with the reason, where nothing drafts or counts."""
    names = plan.server_metrics["spec_decode"]
    drafting = any("--speculative-config" in p.argv for p in plan.processes if p.is_engine)
    if not drafting:
        why["spec_decode"] = "no speculative decoding in this plan"
        return None
    if names is None or doc is None:
        why["spec_decode"] = f"{plan.engine} exports no speculative-decoding counters here" if names is None else (
            "aiperf wrote no server_metrics_export.json")  # fmt: skip
        return None
    totals = {}
    for key, metric in names.items():
        values = [s.get("total") for _, s in _series(doc, metric, url_to_process)]
        totals[key] = sum(v for v in values if v is not None) if values else None
    if totals["drafts"] is None or totals["accepted"] is None:
        why["spec_decode"] = f"no {names['drafts']} series from the engines in aiperf's export"
        return None
    drafts = int(totals["drafts"])
    mean = 1 + totals["accepted"] / drafts if drafts else None
    if mean is None:
        why["spec_decode"] = "the engines drafted nothing over the run"
    draft_tokens = int(totals["draft_tokens"]) if totals["draft_tokens"] is not None else None
    return {"drafts": drafts, "draft_tokens": draft_tokens, "accepted_tokens": int(totals["accepted"]),
            "mean_acceptance_length": mean}  # fmt: skip

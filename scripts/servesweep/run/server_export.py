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
    out: dict[str, dict] = {"metrics": {}, "warmup_metrics": {}}
    for doc in docs:
        for phase, metrics in out.items():
            for name, m in (doc.get(phase) or {}).items():
                metrics.setdefault(name, {"series": []})["series"] += m.get("series") or []
    return out | {"summaries": [d.get("summary") or {} for d in docs]}


def _series(
    doc: dict, metric: str, url_to_process: dict[str, str], labels: dict | None = None
) -> list[tuple[str, dict]]:
    """(process, stats) of each series of ``metric`` scraped from one of the plan's engines (with ``labels``)."""
    out = []
    for s in ((doc.get("metrics") or {}).get(metric) or {}).get("series", []):
        name = url_to_process.get(s.get("endpoint_url", ""))
        mine = all((s.get("labels") or {}).get(k) == v for k, v in (labels or {}).items())
        if name is not None and mine and isinstance(s.get("stats"), dict):
            out.append((name, s["stats"]))
    return out


# Each request's time in an engine's batch, as the engine counts it (vLLM, dynamo.vllm: its running
# phase, prefill + decode; else an aggregated Dynamo worker's whole handling of the request, its own
# queue included; a disaggregated decode worker's would include the wait for its prefill: not used).
# By Little's law its sum over the window divided by the window is the mean number of requests in
# that batch: every request counts, however briefly, where a gauge sees only the instants it was
# read. The first a worker exports is used; (metric, labels, the roles it stands for or None: all).
BUSY_HISTOGRAMS = (
    ("vllm:request_inference_time_seconds", {}, None),
    ("dynamo_component_request_duration_seconds", {"dynamo_endpoint": "generate"}, {"agg"}),
)
MIN_GAUGE_SAMPLES = 20  # a gauge read fewer times over the window gives no batch figure (docs/point.md)


def _busy_batch(doc: dict, url_to_process: dict[str, str], role_of: dict) -> dict[str, tuple[float, int]]:
    """Engine -> (mean requests in its batch over the window, requests it counted), from BUSY_HISTOGRAMS."""
    out: dict[str, tuple[float, int]] = {}
    for metric, labels, roles in BUSY_HISTOGRAMS:
        found: dict[str, list] = {}
        for name, st in _series(doc, metric, url_to_process, labels):
            rate, count = st.get("sum_rate"), st.get("count")
            if (
                rate is not None
                and count is not None
                and name not in out
                and role_of[name] in (roles or {role_of[name]})
            ):
                found.setdefault(name, []).append((rate, int(count)))
        # one series per engine and run (repeats): the runs' mean, every run's requests counted
        out |= {n: (sum(r for r, _ in v) / len(v), sum(c for _, c in v)) for n, v in found.items()}
    return out


def gauge_samples(doc: dict, url: str) -> int | None:
    """How many times aiperf read an engine's metrics within the profiling window: its fetches over
    the whole collection, scaled to the window's share of it (aiperf records no per-phase count)."""
    total = 0
    for summary in doc.get("summaries") or []:
        info = (summary.get("endpoint_info") or {}).get(url) or {}
        window = (summary.get("phase_time_ranges") or {}).get("profiling") or {}
        fetches, first, last = info.get("total_fetches"), info.get("first_fetch_ns"), info.get("last_fetch_ns")
        if fetches is None:
            return None
        share = 1.0
        if window.get("start_ns") and window.get("end_ns") and first is not None and last and last > first:
            share = min(1.0, (window["end_ns"] - window["start_ns"]) / (last - first))
        total += int(fetches * share)
    return total or None


def batch_figures(plan: Plan, doc: dict | None, url_to_process: dict[str, str], why: dict) -> tuple:
    """(running batch per role {role: {mean, p99, source, samples}}, preemptions over the run). The
    mean comes from the engines' own busy-time counters where they export them (``counters``: the
    requests counted), else from the running-requests gauge (``gauge``: how often it was read; a role
    read fewer than MIN_GAUGE_SAMPLES times has no figure). Each series is one engine (a DP rank has
    its own): the role's mean is the mean of its engines' means, its p99 the largest engine p99."""
    spec = plan.server_metrics["batch"]
    if spec is None:
        why["batch_by_role"] = why["preemptions"] = f"{plan.engine} exports no running-requests gauge here"
        return None, None
    if doc is None:
        why["batch_by_role"] = why["preemptions"] = "aiperf wrote no server_metrics_export.json"
        return None, None
    batch = _batch(plan, doc, url_to_process, spec["running"], why) or None
    if batch is None and "batch_by_role" not in why:
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


def _batch(plan: Plan, doc: dict, url_to_process: dict[str, str], gauge: str, why: dict) -> dict:
    role_of = {p.name: p.role for p in plan.processes}
    busy = _busy_batch(doc, url_to_process, role_of)
    gauges: dict[str, list] = {}
    for name, stats in _series(doc, gauge, url_to_process):
        gauges.setdefault(role_of[name], []).append((name, stats))
    out = {}
    for role, st in sorted(gauges.items()):  # a role the gauge does not see has no batch figure (no p99)
        names = {n for n, _ in st}
        p99 = max((s.get("p99") or 0.0 for _, s in st), default=0.0)
        if names <= set(busy):
            means = [busy[n][0] for n in names]
            out[role] = {"mean": sum(means) / len(means), "p99": p99, "source": "counters",
                         "samples": sum(busy[n][1] for n in names)}  # fmt: skip
            continue
        urls = {n: u for u, n in url_to_process.items()}
        counts = [gauge_samples(doc, urls.get(n, "")) for n in names]
        samples = min((c for c in counts if c is not None), default=None)
        if samples is None or samples < MIN_GAUGE_SAMPLES:
            why["batch_by_role"] = (
                f"{role}: the {gauge} gauge was read {samples if samples is not None else 'an unknown number of'} "
                f"time(s) over the window, fewer than {MIN_GAUGE_SAMPLES}: no figure"
            )
            continue
        out[role] = {"mean": sum(s.get("avg") or 0.0 for _, s in st) / len(st), "p99": p99, "source": "gauge",
                     "samples": samples}  # fmt: skip
    return out


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

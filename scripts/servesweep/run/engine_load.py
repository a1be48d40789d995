"""What the engines held over the run, for the diagnosis of a point (report/diagnosis): requests in
flight and waiting, the batch cap the plan gave each role, KV-cache use, and the prefill share of
the engines' request time. Read from aiperf's server-metrics export (run/server_export), the same
gauges the batch figure comes from; a figure the engine does not export is None with the reason."""

from __future__ import annotations

from ..contract.plan import Plan
from .server_export import _series

# The engines' own gauge names, vLLM's first (Dynamo's vLLM component and the mocker export them too).
WAITING = ("vllm:num_requests_waiting", "sglang:num_queue_reqs")
RUNNING = ("vllm:num_requests_running", "sglang:num_running_reqs")
KV_USE = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "sglang:token_usage")  # fractions 0..1
PREFILL_TIME, DECODE_TIME = "vllm:request_prefill_time_seconds", "vllm:request_decode_time_seconds"
# the engine flag that caps its running batch -> engines that read it
CAP_FLAGS = ("--max-num-seqs", "--max-running-requests")


def _first(doc: dict, names: tuple, urls: dict) -> list[dict]:
    """The stats of each engine's series of the first of ``names`` the engines export."""
    for name in names:
        stats = [s for _, s in _series(doc, name, urls)]
        if stats:
            return stats
    return []


def batch_caps(plan: Plan) -> dict | None:
    """Each role's running-batch cap as the plan's engine argv sets it (the smallest engine's), or None
    where no engine of the role names one (the engine's default applies, which the plan does not say)."""
    caps: dict[str, int] = {}
    for p in plan.processes:
        if not p.is_engine or p.headless:
            continue
        for flag in CAP_FLAGS:
            if flag in p.argv[:-1]:
                value = p.argv[p.argv.index(flag) + 1]
                if str(value).isdigit():
                    caps[p.role] = min(caps.get(p.role, int(value)), int(value))
    return caps or None


def figures(plan: Plan, doc: dict | None, urls: dict[str, str], why: dict) -> dict | None:
    """``engine_load``: {in_flight, waiting, kv_cache_use, batch_cap, prefill_share}; None when aiperf
    wrote no server export. Gauges sum over engines for the stack (means) and take the largest p99/max."""
    if doc is None:
        why["engine_load"] = "aiperf wrote no server_metrics_export.json"
        return None
    out = {"batch_cap": batch_caps(plan)}
    if out["batch_cap"] is None:
        why["engine_load.batch_cap"] = f"no engine argv sets {' or '.join(CAP_FLAGS)}: the engine's default applies"
    gauges = (("in_flight", RUNNING, "p99"), ("waiting", WAITING, "p99"), ("kv_cache_use", KV_USE, "max"))
    for key, names, peak in gauges:
        stats = _first(doc, names, urls)
        if not stats:
            out[key] = None
            why[f"engine_load.{key}"] = f"the engines export none of {', '.join(names)} in aiperf's export"
            continue
        means = [s.get("avg") or 0.0 for s in stats]
        total = sum(means) if key != "kv_cache_use" else max(means)  # KV use is per engine: the fullest counts
        out[key] = {"mean": total, peak: max(s.get(peak) or 0.0 for s in stats), "engines": len(stats)}
    out["prefill_share"] = _prefill_share(doc, urls, why)
    return out


def _prefill_share(doc: dict, urls: dict, why: dict) -> float | None:
    """Prefill time over prefill + decode time of the requests the engines finished over the run."""
    sums = []
    for name in (PREFILL_TIME, DECODE_TIME):
        values = [s.get("sum") for _, s in _series(doc, name, urls)]
        sums.append(sum(v for v in values if v is not None) if values else None)
    prefill, decode = sums
    if prefill is None or decode is None or prefill + decode <= 0:
        why["engine_load.prefill_share"] = f"the engines export no {PREFILL_TIME} / {DECODE_TIME} histograms"
        return None
    return prefill / (prefill + decode)

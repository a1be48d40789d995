"""The result of one point: figures from aiperf and the servers, the validity gate, atomic write."""

from __future__ import annotations

import math
import subprocess
from dataclasses import dataclass
from pathlib import Path

from ..contract.figures import PER_GPU, per_gpu
from ..contract.paths import RESULT_SCHEMA_FILE
from ..contract.plan import Plan
from ..fileio.encode import canonical
from ..fileio.files import write_if_changed
from ..fileio.yamlio import schema_errors
from . import bench, energy, metrics, trust

RESULT_SCHEMA = "servesweep.result/3"
ROOT = Path(__file__).resolve().parents[3]


def git_commit() -> str | None:
    try:
        out = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5, check=True
        )
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def _ms_to_s(v):
    return None if v is None else v / 1000.0


@dataclass(frozen=True)
class Scrapes:
    """Server metrics before and after the aiperf run: each worker's request counter, and
    every frontend's samples (summed where a figure is stack-wide)."""

    workers_before: dict
    workers_after: dict
    frontends_before: dict  # frontend -> samples or None
    frontends_after: dict
    engines_before: dict  # serving engine process -> samples or None
    engines_after: dict

    @staticmethod
    def merged(per_process: dict):
        parts = list(per_process.values())
        return None if not parts or any(p is None for p in parts) else [s for p in parts for s in p]

    def window(self, source: str) -> tuple:
        """(samples before, after) of every frontend or every serving engine, summed; None if any failed."""
        pair = (self.frontends_before, self.frontends_after) if source == "frontends" else (
            self.engines_before, self.engines_after)  # fmt: skip
        return self.merged(pair[0]), self.merged(pair[1])


def _outcomes(export: dict, outcomes: dict | None, why: dict) -> tuple[int, int, int]:
    """(completed, errored, cancelled at the grace boundary): aiperf's per-request export tells
    cancellations from errors; without it, its summary's counts (cancellations unknown)."""
    completed = int(bench.stat(export, "request_count") or 0)
    if outcomes is not None:
        return completed, outcomes["errored"], outcomes["cancelled"]
    why["requests_cancelled"] = "aiperf wrote no per-request export: cancellations are counted as errors"
    return completed, int(bench.stat(export, "error_request_count") or 0), 0  # absent when zero


def figures(plan: Plan, export: dict, sc: Scrapes, outcomes: dict | None = None) -> tuple[dict, dict]:
    """(figures, unmeasured reasons). Figures that could not be measured are None."""
    why: dict[str, str] = {}
    st = bench.stat
    completed, errors, cancelled = _outcomes(export, outcomes, why)
    sent = completed + errors + cancelled
    f = {
        "requests_completed": completed,
        "requests_errored": errors,
        "requests_cancelled": cancelled,
        "cancelled_share": cancelled / sent if sent else None,
        "error_rate": (errors / (completed + errors)) if (completed + errors) else None,
        "request_throughput": st(export, "request_throughput"),
        "ttft_s": {q: _ms_to_s(st(export, "time_to_first_token", q)) for q in ("p50", "p90", "p95", "p99")},
        "itl_ms": {q: st(export, "inter_token_latency", q) for q in ("p50", "p90", "p99")},
        "request_latency_s": {q: _ms_to_s(st(export, "request_latency", q)) for q in ("p50", "p99")},
        "output_tps": st(export, "output_token_throughput"),
        "total_tps": st(export, "total_token_throughput"),
        "output_tps_per_user": st(export, "output_token_throughput_per_user"),
        "output_tokens_total": st(export, "total_output_tokens"),
        "benchmark_duration_s": st(export, "benchmark_duration"),
    }
    if f["error_rate"] is None:
        why["error_rate"] = "no requests finished"
    gpus = plan.gpus_total
    f |= per_gpu(f, gpus)  # total_tps_per_gpu: the field's headline (input + output tokens per GPU)
    for name, base in PER_GPU.items():
        if f[name] is None:
            why[name] = f"no {base.replace('_tps', ' throughput')}" if gpus else "plan uses no GPUs"
    f["cache_read_share"] = _cache_share(plan, export, sc, why)
    f["requests_per_worker"] = _per_worker(sc, why)
    f["requests_per_frontend"] = _per_frontend(sc, why)
    f["server_ttft_s"] = _server_ttft(plan, sc, why)
    client_mean = _ms_to_s(st(export, "time_to_first_token"))
    f["client_ttft_mean_s"] = client_mean
    server_mean = f["server_ttft_s"]["mean"]
    f["ttft_gap_s"] = client_mean - server_mean if client_mean is not None and server_mean is not None else None
    if f["ttft_gap_s"] is None:  # a large gap flags a client artifact
        why["ttft_gap_s"] = "client or server TTFT missing"
    return f, why


def _cache_share(plan: Plan, export: dict, sc: Scrapes, why: dict) -> float | None:
    """Prefix-cache share: the server's own counters over the benchmark window, else the responses'.
    A disaggregated Dynamo stack's frontend counts no cached tokens: there the prefill workers'
    counters are used, and without them the figure is unmeasured, never a measured zero."""
    share, cache = None, plan.server_metrics["prefix_cache"]
    disagg = plan.topology["kind"] == "disaggregated" and "prefill_prefix_cache" in plan.server_metrics
    if disagg:
        return _prefill_cache_share(plan, sc, why)
    if cache:
        share = _counter_share(*sc.window(cache["source"]), cache)
    if share is None:
        pct = bench.stat(export, "overall_usage_prompt_cache_read_pct")
        share = pct / 100.0 if pct is not None else None
        if share is None:
            why["cache_read_share"] = "neither the server's counters nor the responses reported cached tokens"
    return share


def _counter_share(before, after, names: dict) -> float | None:
    if before is None or after is None:
        return None
    hits, queries = _delta(before, after, names["hits"]), _delta(before, after, names["queries"])
    return hits / queries if hits is not None and queries else None


def _prefill_cache_share(plan: Plan, sc: Scrapes, why: dict) -> float | None:
    names = plan.server_metrics["prefill_prefix_cache"]
    prefill = [p.name for p in plan.processes if p.role == "prefill" and p.name in sc.engines_after]
    share = None
    if names and prefill:
        pick = lambda d: Scrapes.merged({n: d.get(n) for n in prefill})  # noqa: E731
        share = _counter_share(pick(sc.engines_before), pick(sc.engines_after), names)
    if share is None:
        why["cache_read_share"] = (
            f"disaggregated {plan.engine} stack: the frontend counts no cached tokens there and the prefill workers "
            + ("could not be scraped for their prefix-cache counters" if names else "export no prefix-cache counters")
        )
    return share


def _per_worker(sc: Scrapes, why: dict) -> dict:
    """Requests per worker, from each worker's own counter."""
    out = {}
    for name, b in sc.workers_before.items():
        a = sc.workers_after.get(name)
        out[name] = int(a - b) if a is not None and b is not None else None
        if out[name] is None:
            why[f"requests_per_worker.{name}"] = "worker metrics could not be scraped"
    return out


def _server_ttft(plan: Plan, sc: Scrapes, why: dict) -> dict:
    """TTFT as the server measured it: the frontends' histogram, or every plain engine's."""
    server = {"mean": None, "p50": None, "p95": None}
    ttft = plan.server_metrics["ttft"]
    before, after = sc.window(ttft["source"])
    if before is None or after is None:
        why["server_ttft_s"] = f"the {ttft['source']}' metrics could not be scraped"
        return server
    name = ttft["histogram"]
    s = _delta(before, after, f"{name}_sum")
    c = _delta(before, after, f"{name}_count")
    if s is not None and c:
        server["mean"] = s / c
    hb, ha = metrics.histogram(before, name), metrics.histogram(after, name)
    server["p50"] = metrics.histogram_quantile(hb, ha, 0.50)
    server["p95"] = metrics.histogram_quantile(hb, ha, 0.95)
    return server


def _per_frontend(sc: Scrapes, why: dict) -> dict:
    out = {}
    for fe, a in sc.frontends_after.items():
        b = sc.frontends_before.get(fe)
        out[fe] = _delta(b, a, "dynamo_frontend_requests_total") if a is not None and b is not None else None
        if out[fe] is None:
            why[f"requests_per_frontend.{fe}"] = "frontend metrics could not be scraped"
        else:
            out[fe] = int(out[fe])
    return out


def _delta(before, after, name):
    a, b = metrics.total(after, name), metrics.total(before, name)
    return None if a is None else a - (b or 0.0)


def traffic(plan: Plan, f: dict, records: list | None, why: dict) -> None:
    """``requests_sent`` (aiperf's per-request export, warm-up included) and ``requests_served`` (the
    frontends' counters, else the serving engines'), for the foreign-traffic rule of the gate."""
    f["requests_sent"] = len(records) if records is not None else None
    counts = list((f["requests_per_frontend"] if plan.frontends else f["requests_per_worker"]).values())
    f["requests_served"] = int(sum(counts)) if counts and None not in counts else None
    if f["requests_sent"] is None or f["requests_served"] is None:
        why["requests_served"] = "aiperf's per-request export or the stack's counters are missing: traffic not compared"


FOREIGN_MARGIN = (2, 0.01)  # requests served beyond those sent that are tolerated: absolute, share of sent


def foreign_traffic(f: dict) -> list[str]:
    """The stack served more requests than aiperf sent: someone else sent load during the point."""
    sent, served = f.get("requests_sent"), f.get("requests_served")
    if sent is None or served is None:
        return []
    allowed = sent + max(FOREIGN_MARGIN[0], math.ceil(FOREIGN_MARGIN[1] * sent))
    if served <= allowed:
        return []
    return [f"foreign traffic: the stack served {served} requests during the run, aiperf sent {sent}"]


def gate(plan: Plan, export: dict, f: dict, aiperf_rc: int) -> list[str]:
    """Reasons this run is not a valid result (empty list: valid)."""
    reasons = foreign_traffic(f)
    if aiperf_rc != 0:
        reasons.append(f"aiperf exited with code {aiperf_rc}")
    if not export or "_unreadable" in export:
        reasons.append("aiperf wrote no readable profile_export_aiperf.json")
        return reasons
    if export.get("was_cancelled"):
        reasons.append("aiperf reports the run was cancelled")
    if export.get("is_complete") is False:
        reasons.append("aiperf reports the run is incomplete")
    if not f["output_tokens_total"]:
        reasons.append("the run produced zero output tokens")
    reasons += _cancelled_reasons(plan, f)
    limit = plan.validity["max_error_rate"]
    if f["error_rate"] is None:
        reasons.append("no request completed")
    elif f["error_rate"] > limit:
        summary = "; ".join(
            f"{e.get('count', '?')}x {e.get('error_details', {}).get('message', e)}"[:160]
            for e in (export.get("error_summary") or [])[:3]
        )
        reasons.append(
            f"error rate {f['error_rate']:.1%} ({f['requests_errored']} of "
            f"{f['requests_completed'] + f['requests_errored']}) is over the limit {limit:.1%}"
            + (f": {summary}" if summary else "")
        )
    if f["requests_completed"] >= 2 * max(len(f["requests_per_worker"]), 1):
        idle = [n for n, v in f["requests_per_worker"].items() if v == 0]
        if idle:
            reasons.append(f"worker(s) {', '.join(idle)} served no requests")
    return reasons


def _cancelled_reasons(plan: Plan, f: dict) -> list[str]:
    """Requests still running at the grace boundary are cancelled, not failed: they count against
    the point only when so many were cut short that the load was not really measured."""
    share, limit = f["cancelled_share"], plan.validity["max_cancelled_share"]
    if share is None or share <= limit:
        return []
    return [
        f"{f['requests_cancelled']} requests ({share:.1%}) were still running at the grace boundary "
        f"({plan.benchmark.grace_s:g} s after the benchmark's {plan.benchmark.duration_s or 0:g} s) and were "
        f"cancelled: over the limit {limit:.1%}; raise scenario.grace_s or validity.max_cancelled_share"
    ]


def validate_result(doc: dict) -> list[str]:
    errors = schema_errors(doc, RESULT_SCHEMA_FILE)
    return [f"{'.'.join(map(str, e.absolute_path)) or '(top)'}: {e.message}" for e in errors]


def write_result(path: Path, doc: dict) -> None:
    problems = validate_result(doc)
    if problems:
        raise ValueError(f"result does not match schemas/{RESULT_SCHEMA_FILE}: " + "; ".join(problems[:5]))
    write_if_changed(path, canonical(doc))


@dataclass(frozen=True)
class RunFacts:
    """What only the run knows about a point, for its result's identity and timings."""

    job_id: str
    hosts: list[str]
    start_time: str
    end_time: str
    versions: dict  # package -> version, as the stack's processes reported them
    timings_s: dict
    artifacts: str
    stack: dict  # id, position, startup_s, caches_reset, caches_reset_note


def measurement_terms(plan: Plan, export: dict) -> dict:
    """What changes what a point measures beyond its layout: the scenario aiperf locked (and whether
    aiperf stamped the run submission-valid), and whether Dynamo's request plane ran mutual TLS."""
    locked = None
    if plan.benchmark.aiperf_scenario:
        meta = export.get("metadata") or {}
        locked = {
            "name": plan.benchmark.aiperf_scenario,
            "submission_valid": meta.get("submission_valid"),
            "invalid_reasons": list(meta.get("submission_invalid_reasons") or []),
        }
    dynamo = any("DYN_NAMESPACE" in p.env for p in plan.processes)
    return {"aiperf_scenario": locked, "request_plane_tls": plan.discovery["request_plane_tls"] if dynamo else None}


def _trusted(plan: Plan, figs: dict, why: dict, artifacts: Path) -> dict:
    """The result's figures, unmeasured, marks and silences: the point's marks (run/trust) from aiperf's artifacts; a
    mark saying the client could not time the answers leaves the client-timed figures unmeasured. The
    stack watch's ``stalls`` are added by the driver after this; contract/marks reads both."""
    figs, why = dict(figs), dict(why)
    client, silent = trust.assess(artifacts, plan.benchmark.streaming)
    found = trust.marks(figs, client, silent)
    trust.mask(figs, why, found)
    figs["client"] = client or None
    if not client:
        why["client"] = "aiperf wrote no per-request export: the client's health is unknown"
    return {"figures": figs, "unmeasured": why, "marks": found, "silences": silent}


def client_settings(plan: Plan) -> dict:
    """What the client was asked to do: only points with equal settings are ranked against each other."""
    b = plan.benchmark
    return {"duration_s": b.duration_s, "request_count": b.request_count, "warmup": dict(b.warmup),
            "scenario": b.scenario, "streaming": b.streaming}  # fmt: skip


def _tools(plan: Plan, export: dict, run: RunFacts) -> dict:
    """The versions that measured the point: aiperf, the engine distribution, servesweep, all running."""
    engine = next((f"{d} {run.versions[d]}" for d in plan.server_metrics["distributions"] if d in run.versions), None)
    return {
        "aiperf": export.get("aiperf_version"),
        "engine": engine,
        "servesweep": git_commit(),
        "running": run.versions,
    }


def document(plan: Plan, figs: dict, why: dict, export: dict, run: RunFacts) -> dict:
    """The result file's content (schemas/result.schema.yaml). SLO verdicts are the summary's:
    they follow the recipe's current SLO, which is not part of the plan."""
    warm = plan.benchmark.warmup.get("requests", 0)
    figs = figs | {"energy": energy.figures(plan, export, Path(run.artifacts), why)}  # energy's hook (run/energy)
    trusted = _trusted(plan, figs, why, Path(run.artifacts))  # figures, unmeasured, marks, silences
    identity = {
        "recipe": plan.recipe,
        "concurrency": plan.concurrency,
        "point": plan.point,
        "cluster": plan.cluster,
        "run_cluster": plan.run_cluster,
        "rehearsal": plan.rehearsal,
        "plan_fingerprint": plan.fingerprints["plan"],
        "curve_fingerprint": plan.fingerprints["curve"],
        "image": plan.image,
        "engine": plan.engine,
        "recipe_engine": plan.recipe_engine,
        "model": plan.model["name"],
        "scenario": plan.benchmark.scenario,
        "client_settings": client_settings(plan),
        **measurement_terms(plan, export),
        "topology": plan.topology,
        "discovery": plan.discovery["backend"],
        "stack": run.stack,
        "job_id": run.job_id,
        "hosts": run.hosts,
        "start_time": run.start_time,
        "end_time": run.end_time,
        "tools": _tools(plan, export, run),
    }
    counter, ttft = plan.server_metrics["worker_requests"], plan.server_metrics["ttft"]
    cache = plan.server_metrics["prefix_cache"]
    counting = {
        "requests_per_worker": (
            f"delta of each serving engine's {counter['metric']} over the aiperf run: includes "
            f"{warm} warm-up requests and failed requests, excludes the readiness smoke request"
        ),
        "server_ttft_s": f"{ttft['histogram']} of the {ttft['source']} over the aiperf run",
        "requests_per_frontend": "delta of each frontend's dynamo_frontend_requests_total over the aiperf run",
        "cache_read_share": (
            f"{cache['hits']} / {cache['queries']} of the {cache['source']} over the aiperf run"
            if cache
            else "the responses' cached prompt tokens (aiperf's usage figures)"
        ),
    }
    return {
        "schema": RESULT_SCHEMA,
        "identity": identity,
        **trusted,
        "counting": counting,
        "timings_s": run.timings_s,
        "artifacts": run.artifacts,
    }

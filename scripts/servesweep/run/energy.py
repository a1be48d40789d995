"""GPU power and energy of a point, measured by aiperf from the cluster's GPU telemetry.

The plan's ``benchmark.gpu_telemetry`` (render/telemetry) becomes aiperf's ``--gpu-telemetry``: a DCGM
exporter URL on every node of the stack that holds GPUs, or aiperf's local ``pynvml`` reader. aiperf's
energy analyzer then gives total energy, average power, energy per output token and output tokens
per joule over the profiling window, from the exporters' energy counter where they have one and from
integrated power otherwise; its per-GPU telemetry gives each role's power and the idle power before
the window. The counter is read at the window's ends from aiperf's per-sample export, since aiperf's
delta spans its samples, not the window. Nothing here integrates power by hand."""

from __future__ import annotations

import json
from datetime import datetime
from itertools import pairwise
from pathlib import Path

from ..contract import paths
from ..contract.plan import TELEMETRY_ROLE, Plan
from .repeats import request_records, run_dirs, run_exports
from .spawn import Context

NODES_FILE, TELEMETRY_EXPORT = paths.GPU_TELEMETRY_NODES, paths.AIPERF_GPU_TELEMETRY
POWER, ENERGY = "nvidia_power_usage", "nvidia_energy_consumption"  # aiperf's per-GPU field names
PYNVML = "pynvml://localhost"  # aiperf's name for its own NVML reader's samples


def unmeasured_reason(cluster_name: str, gpus: int) -> str:
    """Why a plan without ``gpu_telemetry`` has no energy figures."""
    if not gpus:
        return "a CPU stack: no GPU to measure"
    return f"cluster {cluster_name} declares no GPU telemetry (telemetry: none or unset)"


def _display(url: str) -> str:
    """aiperf's name for an exporter in its export (exporters/utils.normalize_endpoint_display)."""
    return url.split("://", 1)[-1].removesuffix("/metrics")


def telemetry_argv(plan: Plan, ctx: Context, artifact_dir: Path) -> list[str]:
    """aiperf's telemetry options; which exporter's GPU is which role's is kept in NODES_FILE."""
    spec = plan.benchmark.gpu_telemetry
    if spec is None:
        return ["--no-gpu-telemetry"]
    nodes: dict[int, dict[str, str]] = {}
    first: dict[int, str] = {}
    for p in plan.processes:
        if p.gpus:
            first.setdefault(p.node, p.name)
            nodes.setdefault(p.node, {}).update({str(g): p.role for g in p.gpus})
    if spec["source"] == "pynvml":  # aiperf reads the GPUs of its own host: the stack's one node
        urls, argv = {n: PYNVML for n in sorted(nodes)[:1]}, ["--gpu-telemetry", "pynvml"]
    else:
        urls = {n: _exporter_url(plan, ctx, n, first[n]) for n in sorted(nodes)}
        argv = ["--gpu-telemetry", *urls.values()]
    artifact_dir.mkdir(parents=True, exist_ok=True)
    (artifact_dir / NODES_FILE).write_text(json.dumps({_display(u): nodes[n] for n, u in urls.items()}, indent=1))
    return argv


def _exporter_url(plan: Plan, ctx: Context, node: int, on_node: str) -> str:
    """The exporter of ``node``: the site's at its fixed port, or the one the stack started there."""
    spec = plan.benchmark.gpu_telemetry
    if spec["source"] == "dcgm":
        return f"http://{ctx.addr(on_node)}:{spec['port']}/metrics"
    own = next(p for p in plan.processes if p.role == TELEMETRY_ROLE and p.node == node)
    return ctx.url(own.health_url, own.name)


def telemetry_env(plan: Plan) -> dict:
    """aiperf's exporters are the plan's only (it would add localhost:9400/9401, whoever serves them, to
    its sums), sampled every ``interval_s`` where the cluster says; the energy counter's last sample may
    land up to two samples after the window (aiperf's grace)."""
    spec = plan.benchmark.gpu_telemetry or {}
    env = {"AIPERF_GPU_DEFAULT_DCGM_ENDPOINTS": "[]"}
    if spec.get("interval_s"):
        env["AIPERF_GPU_COLLECTION_INTERVAL"] = str(spec["interval_s"])
        env["AIPERF_GPU_FINAL_SCRAPE_GRACE_NS"] = str(round(2e9 * spec["interval_s"]))
    return env


def _gpus(export: dict) -> dict[tuple[str, str], dict]:
    """(exporter, GPU index) -> aiperf's per-GPU metrics over the profiling window (the energy counter's
    delta is the one its energy analyzer sums)."""
    endpoints = (export.get("telemetry_data") or {}).get("endpoints") or {}
    return {
        (ep, str(g.get("gpu_index"))): g.get("metrics") or {}
        for ep, e in endpoints.items()
        for g in ((e or {}).get("gpus") or {}).values()
    }


def _window(export: dict) -> tuple[float, float] | None:
    """The profiling window aiperf's analyzer divides energy by: its export's start and end times (s)."""
    try:
        start, end = (datetime.fromisoformat(export[k]).timestamp() for k in ("start_time", "end_time"))
    except (KeyError, TypeError, ValueError):
        return None
    return (start, end) if end != start else None


def _roles(artifact_dir: Path) -> dict[tuple[str, str], str]:
    """(exporter, GPU index) -> role of each of the stack's GPUs, as telemetry_argv recorded them."""
    try:
        roles = json.loads((artifact_dir / NODES_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return {(ep, g): role for ep, per_gpu in roles.items() for g, role in per_gpu.items()}


def _run_joules(plan: Plan, export: dict, samples: list, ours: dict, why: dict) -> tuple | None:
    """One aiperf run: (joules of each of the stack's GPUs, the window in s, whether from the counter),
    the counter over the window where every GPU has one, else aiperf's mean power x the window, as aiperf's
    own analyzer chooses; None with the reason when aiperf measured not all of them (an exporter not reached)."""
    spec, measured, bounds = plan.benchmark.gpu_telemetry, _gpus(export), _window(export)
    missing = sorted(f"{ep} GPU {g}" for ep, g in ours if not {POWER, ENERGY} & set(measured.get((ep, g), {})))
    if bounds is None:
        why["energy"] = "aiperf's export has no profiling window (start_time, end_time)"
        return None
    if not ours or missing:
        what = {"pynvml": "pynvml", "exporter": "the stack's exporters"}.get(spec["source"], "")
        what = what or f"the DCGM exporters at port {spec['port']}"
        shown = ", ".join(missing[:4]) + (" …" if len(missing) > 4 else "") if missing else "any GPU of the stack"
        why["energy"] = f"aiperf measured no power or energy from {what} for {shown} over the window"
        return None
    window = bounds[1] - bounds[0]
    counter = all((measured[k].get(ENERGY) or {}).get("avg") for k in ours)
    if counter:
        exact = _window_joules(samples, bounds, ours)
        return exact or {k: measured[k][ENERGY]["avg"] * 1e6 for k in ours}, window, True
    return {k: (measured[k].get(POWER) or {}).get("avg", 0.0) * window for k in ours}, window, False


def figures(plan: Plan, export: dict, artifact_dir: Path, why: dict) -> dict | None:
    """The result's ``energy`` over the stack's own GPUs (a node's exporter lists all of its GPUs), summed
    over aiperf's runs (repeats) with their tokens and windows; None with the reason where not measured."""
    spec = plan.benchmark.gpu_telemetry
    if spec is None:
        why["energy"] = unmeasured_reason(plan.run_cluster, plan.gpus_total)
        return None
    if spec["source"] == "pynvml" and len({p.node for p in plan.processes if p.gpus}) > 1:
        why["energy"] = "pynvml reads the client's own host only and this stack's GPUs span several nodes"
        return None
    ours = _roles(artifact_dir)
    samples = [_samples(d, ours) for d in run_dirs(artifact_dir)]  # each run's, read once
    read = [(e, s) for e, s in zip(run_exports(artifact_dir), samples, strict=True) if e and "_unreadable" not in e]
    read = read or [(export, samples[0])]
    exports = [e for e, _ in read]
    runs = [_run_joules(plan, e, d, ours, why) for e, d in read]
    if any(r is None for r in runs):
        return None
    joules = {k: sum(r[0][k] for r in runs) for k in ours}
    window, total = sum(r[1] for r in runs), sum(joules.values())
    tokens = sum(_stat(e, "total_output_tokens") or 0 for e in exports)
    by_role: dict[str, list[float]] = {}
    for k, role in ours.items():
        by_role.setdefault(role, []).append(joules[k] / window)
    return {
        "source": "counter" if all(r[2] for r in runs) else "integrated power",
        "gpus": len(ours),
        "avg_power_w_per_gpu": total / window / len(ours),
        "power_w_per_gpu_by_role": {r: sum(w) / len(w) for r, w in sorted(by_role.items())}
        if len(by_role) > 1
        else None,
        "energy_j": total,
        "energy_per_output_token_j": total / tokens if tokens else None,
        "output_tokens_per_joule": tokens / total if tokens and total else None,
        "idle_power_w_per_gpu": _idle(artifact_dir, samples[0], why),
        "telemetry": sorted({ep for ep, _ in ours}),
    }


def _samples(run_dir: Path, ours: dict) -> list[tuple[tuple[str, str], float, dict]]:
    """aiperf's per-sample telemetry export of one run, the stack's own GPUs only: ((exporter, GPU index),
    the sample's time in ns, its figures); a line that is not such a sample is skipped."""
    try:
        lines = (run_dir / TELEMETRY_EXPORT).read_text().splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        try:
            s = json.loads(line)
            key = (_display(s["telemetry_source_url"]), str(s["gpu_index"]))
            ns, data = s["timestamp_ns"], s["telemetry_data"]
        except (ValueError, KeyError, TypeError):
            continue
        if key in ours and isinstance(ns, (int, float)) and isinstance(data, dict):
            out.append((key, ns, data))
    return out


def _counters(samples: list) -> dict[tuple, list[tuple[float, float]]]:
    """(exporter, GPU index) -> the energy counter's samples (s, J), in time order."""
    counters: dict[tuple, list[tuple[float, float]]] = {}
    for key, ns, data in samples:
        megajoules = data.get(ENERGY)
        if isinstance(megajoules, (int, float)):
            counters.setdefault(key, []).append((ns / 1e9, megajoules * 1e6))
    return {k: sorted(v) for k, v in counters.items()}


def _counter_at(samples: list[tuple[float, float]], t: float) -> float | None:
    """The counter at ``t``, between the samples either side of it (the power constant between two samples)."""
    for (t0, j0), (t1, j1) in pairwise(samples):
        if t0 <= t <= t1:
            return j0 + (j1 - j0) * (t - t0) / (t1 - t0) if t1 > t0 else j0
    return None


def _window_joules(samples: list, bounds: tuple[float, float], ours: dict) -> dict | None:
    """Each GPU's joules over exactly aiperf's profiling window, from its per-sample export: aiperf's own
    delta runs from the first sample in the window to the last one within its grace after it, which over-
    counts by up to a sample interval and more when a loaded client scrapes late. None where a boundary has
    no sample on both sides (then aiperf's delta is the figure)."""
    counters, joules = _counters(samples), {}
    for k in ours:
        at_start, at_end = (_counter_at(counters.get(k, []), t) for t in bounds)
        if at_start is None or at_end is None:
            return None
        joules[k] = at_end - at_start
    return joules


def _stat(export: dict, metric: str):
    m = export.get(metric)
    return m.get("avg") if isinstance(m, dict) else None


def _idle(artifact_dir: Path, samples: list, why: dict) -> float | None:
    """Mean power of the stack's GPUs over aiperf's samples (its first run's) taken before its first request
    (warm-up included)."""
    records = request_records(artifact_dir) or []
    starts = [(r.get("metadata") or {}).get("request_start_ns") for r in records]
    first = min((s for s in starts if s), default=None)
    watts: dict[tuple, list[float]] = {}
    for key, ns, data in samples:
        if first is not None and data.get(POWER) is not None and ns < first:
            watts.setdefault(key, []).append(data[POWER])
    if not watts:
        why["energy.idle_power_w_per_gpu"] = "aiperf took no GPU telemetry sample before its first request"
        return None
    return sum(sum(w) / len(w) for w in watts.values()) / len(watts)

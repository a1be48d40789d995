"""GPU power and energy of a point, measured by aiperf from the cluster's GPU telemetry.

The plan's ``benchmark.gpu_telemetry`` (render/telemetry) becomes aiperf's ``--gpu-telemetry``: a DCGM
exporter URL on every node of the stack that holds GPUs, or aiperf's local ``pynvml`` reader. aiperf's
energy analyzer then gives total energy, average power, energy per output token and output tokens
per joule over the profiling window, from the exporters' energy counter where they have one and from
integrated power otherwise; its per-GPU telemetry gives each role's power and the idle power before
the window. Nothing here integrates power by hand."""

from __future__ import annotations

import json
from pathlib import Path

from ..contract.plan import Plan
from ..render.telemetry import unmeasured_reason
from .repeats import request_records, run_dirs
from .spawn import Context

NODES_FILE = "gpu-telemetry-nodes.json"  # beside aiperf's artifacts: exporter -> GPU index -> role
TELEMETRY_EXPORT = "gpu_telemetry_export.jsonl"  # aiperf's per-sample telemetry export
POWER, ENERGY = "nvidia_power_usage", "nvidia_energy_consumption"  # aiperf's per-GPU field names
# aiperf's exporters are ours only: it would add localhost:9400/9401, whoever serves them, to the sum
ENV = {"AIPERF_GPU_DEFAULT_DCGM_ENDPOINTS": "[]"}


def _display(url: str) -> str:
    """aiperf's name for an exporter in its export (exporters/utils.normalize_endpoint_display)."""
    return url.split("://", 1)[-1].removesuffix("/metrics")


def telemetry_argv(plan: Plan, ctx: Context, artifact_dir: Path) -> list[str]:
    """aiperf's telemetry options; for DCGM, which node's GPU is which role's is kept in NODES_FILE."""
    spec = plan.benchmark.gpu_telemetry
    if spec is None:
        return ["--no-gpu-telemetry"]
    if spec["source"] == "pynvml":
        return ["--gpu-telemetry", "pynvml"]
    nodes: dict[int, dict[str, str]] = {}
    first: dict[int, str] = {}
    for p in plan.processes:
        if p.gpus:
            first.setdefault(p.node, p.name)
            nodes.setdefault(p.node, {}).update({str(g): p.role for g in p.gpus})
    urls = {n: f"http://{ctx.addr(first[n])}:{spec['port']}/metrics" for n in sorted(nodes)}
    artifact_dir.mkdir(parents=True, exist_ok=True)
    (artifact_dir / NODES_FILE).write_text(json.dumps({_display(u): nodes[n] for n, u in urls.items()}, indent=1))
    return ["--gpu-telemetry", *urls.values()]


def _stat(export: dict, metric: str):
    m = export.get(metric)
    return m.get("avg") if isinstance(m, dict) else None


def _gpus(export: dict) -> list[tuple[str, dict]]:
    """(exporter, per-GPU summary) of every GPU in aiperf's telemetry over the profiling window."""
    endpoints = (export.get("telemetry_data") or {}).get("endpoints") or {}
    return [(ep, g) for ep, e in endpoints.items() for g in ((e or {}).get("gpus") or {}).values()]


def figures(plan: Plan, export: dict, artifact_dir: Path, why: dict) -> dict | None:
    """The result's ``energy``; None with the reason where the point's GPUs were not measured."""
    spec = plan.benchmark.gpu_telemetry
    if spec is None:
        why["energy"] = unmeasured_reason(plan.run_cluster, plan.gpus_total)
        return None
    gpus = [(ep, g) for ep, g in _gpus(export) if POWER in g["metrics"] or ENERGY in g["metrics"]]
    energy_j = _stat(export, "nvidia_total_gpu_energy")
    if not gpus or energy_j is None:
        what = "pynvml" if spec["source"] == "pynvml" else f"the DCGM exporters at port {spec['port']}"
        why["energy"] = f"aiperf measured no GPU power or energy from {what} over the window"
        return None
    if len(gpus) != plan.gpus_total:
        why["energy"] = (
            f"aiperf's telemetry reports {len(gpus)} GPUs and the stack holds {plan.gpus_total}: "
            "its energy would not be this stack's"
        )
        return None
    per_token = _stat(export, "nvidia_energy_per_output_token")  # mJ per token
    counter = any((g["metrics"].get(ENERGY) or {}).get("avg") for _, g in gpus)
    return {
        "source": "counter" if counter else "integrated power",
        "gpus": len(gpus),
        "avg_power_w_per_gpu": (_stat(export, "nvidia_average_gpu_power") or 0.0) / len(gpus),
        "power_w_per_gpu_by_role": _by_role(gpus, artifact_dir),
        "energy_j": energy_j,
        "energy_per_output_token_j": None if per_token is None else per_token / 1000,
        "output_tokens_per_joule": _stat(export, "nvidia_output_tokens_per_joule"),
        "idle_power_w_per_gpu": _idle(artifact_dir, why),
        "telemetry": sorted({ep for ep, _ in gpus}),
    }


def _by_role(gpus: list[tuple[str, dict]], artifact_dir: Path) -> dict | None:
    """Each role's mean GPU power over the window, where the stack's GPUs serve more than one role."""
    try:
        roles = json.loads((artifact_dir / NODES_FILE).read_text())
    except (OSError, ValueError):
        return None
    power: dict[str, list[float]] = {}
    for ep, g in gpus:
        role, avg = (roles.get(ep) or {}).get(str(g["gpu_index"])), (g["metrics"].get(POWER) or {}).get("avg")
        if role is not None and avg is not None:
            power.setdefault(role, []).append(avg)
    return {r: sum(w) / len(w) for r, w in sorted(power.items())} if len(power) > 1 else None


def _idle(artifact_dir: Path, why: dict) -> float | None:
    """Mean GPU power over aiperf's samples taken before its first request (warm-up included)."""
    records = request_records(artifact_dir) or []
    starts = [(r.get("metadata") or {}).get("request_start_ns") for r in records]
    first = min((s for s in starts if s), default=None)
    samples: dict[tuple, list[float]] = {}
    try:
        lines = (run_dirs(artifact_dir)[0] / TELEMETRY_EXPORT).read_text().splitlines()
    except OSError:
        lines = []
    for line in lines:
        try:
            s = json.loads(line)
        except ValueError:
            continue
        watts = (s.get("telemetry_data") or {}).get(POWER)
        if first is not None and watts is not None and s.get("timestamp_ns", first) < first:
            samples.setdefault((s.get("telemetry_source_url"), s.get("gpu_index")), []).append(watts)
    if not samples:
        why["energy.idle_power_w_per_gpu"] = "aiperf took no GPU telemetry sample before its first request"
        return None
    return sum(sum(w) / len(w) for w in samples.values()) / len(samples)

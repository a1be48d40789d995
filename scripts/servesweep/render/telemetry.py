"""Where a point's GPU power and energy come from: the cluster's ``telemetry`` fact, as the plan's
``benchmark.gpu_telemetry`` (run/energy turns it into aiperf's ``--gpu-telemetry`` and reads the figures)."""

from __future__ import annotations

from .cluster import Cluster


def plan_field(cluster: Cluster) -> dict:
    """``{"gpu_telemetry": {...}}`` for the benchmark settings, or nothing where the cluster measures no
    power (telemetry none or unset): such a plan is the one it was before telemetry existed."""
    t = cluster.doc.get("telemetry") or {"source": "none"}
    if t["source"] == "none":
        return {}
    spec = {"source": t["source"]} | {k: t[k] for k in ("port", "interval_s") if k in t}
    return {"gpu_telemetry": spec}


def unmeasured_reason(cluster_name: str, gpus: int) -> str:
    """Why a plan without ``gpu_telemetry`` has no energy figures."""
    if not gpus:
        return "a CPU stack: no GPU to measure"
    return f"cluster {cluster_name} declares no GPU telemetry (telemetry: none or unset)"

"""Where a point's GPU power and energy come from: the cluster's ``telemetry`` fact, as the plan's
``benchmark.gpu_telemetry`` (run/energy turns it into aiperf's ``--gpu-telemetry`` and reads the figures)."""

from __future__ import annotations

from ..contract.plan import TELEMETRY_ROLE
from ..fileio.errors import InputError, Problem
from .cluster import Cluster
from .engines import ProcessSpec
from .ports import PortAllocator

ROLE = TELEMETRY_ROLE  # the plan's role of an exporter the stack starts on each GPU node
PORT = "{port}"  # where an exporter command takes the port the plan's port table gives it


def plan_field(cluster: Cluster) -> dict:
    """``{"gpu_telemetry": {...}}`` for the benchmark settings, or nothing where the cluster measures no
    power (telemetry none or unset): such a plan is the one it was before telemetry existed."""
    t = cluster.doc.get("telemetry") or {"source": "none"}
    if t["source"] == "none":
        return {}
    spec = {"source": t["source"]} | {k: t[k] for k in ("port", "interval_s") if k in t}
    return {"gpu_telemetry": spec}


def exporters(cluster: Cluster, engine_procs: list, alloc: PortAllocator) -> list[tuple[int, ProcessSpec]]:
    """(node, spec) of the exporter the stack starts on each node holding GPUs, where the cluster says
    ``telemetry: {source: exporter, command}``: a stack process on a port of the plan's port table."""
    t = cluster.doc.get("telemetry") or {}
    if t.get("source") != "exporter":
        return []
    if not any(PORT in a for a in t["command"]):
        reason = f"names no {PORT}: the exporter must listen on the port the plan gives it"
        raise InputError([Problem(cluster.source, "telemetry.command", reason)])
    out = []
    for node in sorted({p.node for p in engine_procs if p.gpus}):
        argv = tuple(a.replace(PORT, "{port:self.metrics}") for a in t["command"])
        url = "http://{addr:self}:{port:self.metrics}/metrics"  # its health: it serves what aiperf reads
        out.append((node, ProcessSpec({"metrics": alloc.take()}, argv, {}, url, None)))
    return out

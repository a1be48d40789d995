"""A point's benchmark settings (what aiperf runs) and the job time they need: part of its plan."""

from __future__ import annotations

import math

from ..contract.plan import REPEAT_COOLDOWN_S, host_side
from . import scenarios, telemetry
from .cluster import Cluster
from .sweep import MIN_SCREEN_S

REHEARSAL_DATASET = {"synthetic": {"isl": 256, "osl": 32, "entries": 500}}
# an agentic (Weka-format) recipe rehearses on a small generated trace of that format (tools/traces)
REHEARSAL_WEKA_TRACE = "agentx-rehearsal"  # under the rehearsal host's trace_dir


def settings(doc: dict, conc: int, cluster: Cluster, rehearsal: Cluster | None, share: float = 1.0) -> dict:
    """``share``: a halving screen's share of a full point (render/sweep.screen_share), which a
    rehearsal keeps: its screens run that share of the rehearsal's window, as on the cluster."""
    scen = doc["scenario"]
    dataset = scen["dataset"]
    duration = scen.get("duration_s")
    requests = scen.get("requests")
    warmup = dict(scen.get("warmup") or {})
    grace = scen.get("grace_s", DEFAULT_GRACE_S)
    tools = rehearsal or cluster
    if rehearsal is not None:
        dataset, warmup = _rehearsal_dataset(scen, rehearsal, conc)
        conc = min(conc, rehearsal.rehearsal_max_concurrency)
        cap = rehearsal.rehearsal_max_duration_s
        grace = min(grace, cap)
        window = cap if share >= 1 else max(round(cap * share, 3), min(cap, MIN_SCREEN_S))  # cap: as written
        if duration:
            duration, requests = min(duration, window), None
        else:
            requests = min(requests, max(conc, math.ceil(conc * 4 * share)))  # a screen still reaches its load
    (kind, ds), *_ = dataset.items()
    if "path" in ds and doc.get("image") and cluster.container_runtime and rehearsal is None:
        # the recipe names the path its engines see (placeholders are container-side); aiperf runs on the host
        host = host_side(ds["path"], cluster.container_mounts)
        ds = {**ds, "path": host} if host is not None else ds
    if kind == "public":
        ds = {**ds, "hf_repo": scenarios.PUBLIC_WEKA[ds["name"]]}
    return {
        "endpoint": scen.get("endpoint", "chat"),
        "streaming": True,
        "concurrency": conc,
        "duration_s": duration,
        "grace_s": grace,
        "repeats": 1 if rehearsal is not None else doc.get("repeats", 1),
        "request_count": requests,
        "warmup": warmup,
        "dataset": {"kind": kind, **ds},
        "session_header": scen.get("session_header"),
        "scenario": scen["name"],
        "aiperf_scenario": scen.get("aiperf_scenario"),
        # a rehearsal runs below the lock's minimum duration: aiperf then stamps it not submission-valid
        "scenario_override": bool(scen.get("aiperf_scenario")) and rehearsal is not None,
        "aiperf": tools.aiperf,
        "tokenizer": tools.tokenizer,
        "hf_home": tools.hf_home,
        **telemetry.plan_field(tools),  # where aiperf reads GPU power; the rehearsal's own cluster in a rehearsal
    }


def _rehearsal_dataset(scen: dict, rehearsal: Cluster, conc: int) -> tuple[dict, dict]:
    """(dataset, warm-up) of a rehearsal: small, local, and of the recipe's own kind."""
    warmup, cap = scen.get("warmup") or {}, rehearsal.rehearsal_max_duration_s
    if scenarios.trace_format(scen) == "weka":
        path = f"{rehearsal.placeholders.get('trace_dir', 'recipes/traces')}/{REHEARSAL_WEKA_TRACE}"
        agentic = {k: min(warmup[k], cap) for k in scenarios.AGENTIC_WARMUP if k in warmup}
        return {"trace": {"path": path, "format": "weka"}}, agentic
    capped = min(warmup.get("requests", 0), min(conc, rehearsal.rehearsal_max_concurrency))
    return REHEARSAL_DATASET, ({"requests": capped} if warmup else {})


DEFAULT_GRACE_S = 30  # aiperf's --benchmark-grace-period unless scenario.grace_s says otherwise


def time_budget(doc: dict, cluster: Cluster, bench: dict) -> dict:
    """A job's time: one startup (the readiness timeout) plus each point's warm-up, run and grace,
    plus the cluster's margin. A curve on one stack pays the startup once."""
    readiness = (doc.get("readiness") or {}).get("timeout_s", cluster.readiness_timeout_s)
    run = bench["duration_s"] or 600
    w = bench["warmup"]
    warm = sum(w.get(k, 0) for k in ("duration_s", *scenarios.AGENTIC_WARMUP)) + (60 if w.get("requests") else 0)
    k = bench["repeats"]
    point = warm + k * (run + bench["grace_s"]) + (k - 1) * REPEAT_COOLDOWN_S
    return {
        "startup_s": readiness + cluster.runtime_margin_s,
        "point_s": point,
        "runtime_min": math.ceil((readiness + point + cluster.runtime_margin_s) / 60),
    }

"""Dynamo's SGLang backend (``python -m dynamo.sglang``): node 0 of a wide worker serves, the others follow."""

from __future__ import annotations

from ..engines import EngineInput
from . import _dynamo
from ._common import SGLANG_BATCH, SGLANG_REHEARSED, multi_node_flags, sglang_parallel_flags
from .base import ArgParser, EngineKind, Findings


def _render(e: EngineInput, ports: dict, env: dict) -> tuple[list[str], bool]:
    model, s, role = e.doc["model"], e.slot, e.slot.worker.role
    argv = [e.python, "-m", "dynamo.sglang", "--model-path", model["path"], "--served-model-name", model["name"]]
    argv += e.planes.flags() + sglang_parallel_flags(role)
    argv += multi_node_flags(e, ports, "dist-init")  # node 0 serves, the others follow it
    if e.disagg:
        argv += _dynamo.role_flags(e)
        ports["bootstrap"] = e.alloc.take()
        argv += ["--disaggregation-bootstrap-port", "{port:self.bootstrap}"]
    return argv + e.user_args, not s.leader


def _problems(recipe) -> Findings:
    if not recipe.disaggregated and recipe.roles()[0].workers > 1:
        return [
            ("topology.aggregated.replicas", "dynamo.sglang supports one replica behind the frontend; use replicas: 1")
        ]
    return []


KIND = EngineKind(
    name="dynamo.sglang",
    process=_dynamo.process(_render),
    dynamo=True,
    distributions=("sglang",),
    metrics={**_dynamo.METRICS, "batch": SGLANG_BATCH},
    parser=ArgParser("parse_args", "dynamo.sglang.args", "ai-dynamo"),
    kv_events_per_replica=True,
    problems=_problems,
    rehearsal_flags=SGLANG_REHEARSED,
)

"""Dynamo's mocker: a simulated vLLM engine (no GPU), the laptop default and every rehearsal's stand-in."""

from __future__ import annotations

from ..engines import EngineInput
from . import _dynamo
from ._common import VLLM_BATCH, own_ranks
from .base import ArgParser, EngineKind


def _render(e: EngineInput, ports: dict, env: dict) -> tuple[list[str], bool]:
    model, s = e.doc["model"], e.slot
    argv = [e.python, "-m", "dynamo.mocker", "--model-path", model["path"], "--model-name", model["name"]]
    argv += e.planes.flags()
    if s.dp_local > 1:
        argv += ["--data-parallel-size", str(s.dp_local)]
    if e.shared.kv_events:  # the mocker binds the port it is given + its local rank
        ports["kv_events"] = own_ranks(e, e.shared.kv_events)
        argv += ["--zmq-kv-events-ports", "{rank_port:self.kv_events}"]
    argv += _dynamo.role_flags(e)
    if s.worker.role.name == "prefill":
        ports["bootstrap"] = e.alloc.take()
        argv += ["--bootstrap-ports", "{port:self.bootstrap}"]
    return argv + e.user_args, False


KIND = EngineKind(
    name="dynamo.mocker",
    process=_dynamo.process(_render),
    dynamo=True,
    distributions=(),  # no engine package of its own: it is part of ai-dynamo
    metrics={**_dynamo.METRICS, "batch": VLLM_BATCH},  # vLLM's names; no prefix-cache counters
    parser=ArgParser("parse_args", "dynamo.mocker.args", "ai-dynamo"),
    shared_ports=lambda kv_router, disagg, multi_dp: (kv_router, False, False),
    owned_flags={"--zmq-kv-events-ports": "the launcher gives each replica its own KV-event ports"},
    per_gpu=True,
    kv_events_per_replica=True,
)

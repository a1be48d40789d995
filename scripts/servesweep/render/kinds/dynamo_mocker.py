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
    if e.shared.kv_events:  # kept free as the engine it stands in for binds it (the same layout)
        ports["kv_events"] = own_ranks(e, e.shared.kv_events)
    # No --zmq-kv-events-ports: its ZMQ relay binds tcp://* (every interface, no credential), and the
    # mocker publishes its KV events to the router through the stack's event plane without it.
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
    owned_flags={
        "--zmq-kv-events-ports": "its ZMQ relay binds every interface; the mocker publishes KV events through the "
        "stack's event plane",
        "--zmq-replay-ports": "binds every interface",
    },
    per_gpu=True,
    kv_events_per_replica=True,
)

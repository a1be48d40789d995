"""What every kind under Dynamo's runtime shares: the system port, health, registrations and the
frontend's metric names (Dynamo ``lib/runtime`` and the frontend's Prometheus exporters)."""

from __future__ import annotations

from collections.abc import Callable

from ..engines import GUARDED_PORT, EngineInput, ProcessSpec, host_env, http_urls
from ._common import gpus_env

METRICS = {
    "worker_requests": {"metric": "dynamo_component_requests_total", "labels": {"dynamo_endpoint": "generate"}},
    "ttft": {"histogram": "dynamo_frontend_time_to_first_token_seconds", "source": "frontends"},
    "prefix_cache": {
        "hits": "dynamo_frontend_cached_tokens_sum",
        "queries": "dynamo_frontend_input_sequence_tokens_sum",
        "source": "frontends",
    },
    # disaggregated stacks: the frontend counts no cached tokens there; the prefill workers' own
    # counters do where the kind exports them (the kind's module overrides this)
    "prefill_prefix_cache": None,
}

# every Dynamo worker's system server: on loopback (its sysguard serves the public port), healthy
# once its generate endpoint is (render/launcher_env refuses these in recipes)
FRAME_ENV = {
    "DYN_SYSTEM_HOST": "127.0.0.1",
    "DYN_SYSTEM_PORT": f"{{port:self.{GUARDED_PORT}}}",
    "DYN_SYSTEM_USE_ENDPOINT_HEALTH_STATUS": '["generate"]',
}

# argv, headless = render(e, ports, env): the kind's own arguments; ports/env are filled in place
Render = Callable[[EngineInput, dict, dict], tuple[list[str], bool]]


def process(render: Render) -> Callable[[EngineInput], ProcessSpec]:
    """A kind's ``process``: its arguments inside Dynamo's common frame (system port serving health
    and metrics, the stack's planes, one registration per serving process)."""

    def spec(e: EngineInput) -> ProcessSpec:
        # the system server (admin routes included) on loopback; the node's sysguard serves its
        # read-only routes on the public `system` port (render/engines.system_guards)
        ports = {"system": e.alloc.take(), GUARDED_PORT: e.alloc.take()}
        env = {**host_env(), **e.planes.env(), **gpus_env(e), **FRAME_ENV}
        argv, headless = render(e, ports, env)
        health, metrics = http_urls("system")
        if headless:
            return ProcessSpec(ports, tuple(argv), env, None, metrics, {}, True)
        component = "prefill" if e.slot.worker.role.name == "prefill" else "backend"
        return ProcessSpec(ports, tuple(argv), env, health, metrics, {component: 1})

    return spec


def role_flags(e: EngineInput) -> list[str]:
    return ["--disaggregation-mode", e.slot.worker.role.name] if e.disagg else []

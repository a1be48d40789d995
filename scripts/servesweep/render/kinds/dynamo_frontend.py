"""Dynamo's frontend (``python -m dynamo.frontend``): the OpenAI server and router in front of a
Dynamo stack's workers. Not an engine kind a recipe names; every Dynamo kind is served by it."""

from __future__ import annotations

from dataclasses import dataclass

from ...fileio.encode import num_arg
from ..engines import Planes, ProcessSpec, host_env, http_urls
from ..ports import PortAllocator
from .base import ArgParser

_HOST_PORT = "the launcher sets host and port per process"
_PLANES = "the launcher sets discovery and transport for each stack"


def _process(recipe_doc: dict, python: str, alloc: PortAllocator, planes: Planes) -> ProcessSpec:
    fe = recipe_doc.get("frontend") or {}
    router = fe.get("router") or {}
    argv = [python, "-m", "dynamo.frontend", "--http-port", "{port:self.http}"]
    argv += ["--router-mode", router.get("mode", "kv"), "--namespace", "{namespace}"]
    if "min_initial_workers" in router:
        argv += ["--router-min-initial-workers", str(router["min_initial_workers"])]
    if "prefill_load_scale" in router:
        argv += ["--router-prefill-load-scale", num_arg(router["prefill_load_scale"])]
    aff = router.get("session_affinity")
    if aff:
        argv += ["--router-session-affinity-ttl-secs", str(aff["ttl_s"])]
        argv += ["--router-session-affinity-mode", aff.get("mode", "hard")]
    argv += planes.flags() + [str(a) for a in fe.get("args", [])]
    env = {**host_env(), **planes.env(), "DYN_HTTP_HOST": "{addr:self}"}
    return ProcessSpec({"http": alloc.take()}, tuple(argv), env, *http_urls())


@dataclass(frozen=True)
class Frontend:
    process = staticmethod(_process)
    parser = ArgParser("dynamo_frontend", "", "ai-dynamo")
    owned_flags = {
        "--http-port": _HOST_PORT,
        "--http-host": _HOST_PORT,
        "--router-mode": "set frontend.router.mode instead",
        "--router-min-initial-workers": "set frontend.router.min_initial_workers instead",
        "--router-prefill-load-scale": "set frontend.router.prefill_load_scale instead",
        "--router-session-affinity-ttl-secs": "set frontend.router.session_affinity.ttl_s instead",
        "--router-session-affinity-mode": "set frontend.router.session_affinity.mode instead",
        "--discovery-backend": _PLANES,
        "--request-plane": _PLANES,
        "--event-plane": _PLANES,
        "--namespace": _PLANES,
    }


FRONTEND = Frontend()

"""vLLM's own OpenAI server, without Dynamo."""

from __future__ import annotations

from ..engines import EngineInput, ProcessSpec
from . import _plain
from ._common import (
    VLLM_BATCH,
    VLLM_DISTRIBUTIONS,
    VLLM_PREFIX_CACHE,
    VLLM_REHEARSED,
    VLLM_SPEC_DECODE,
    gpus_env,
    multi_node_flags,
    parallel_flags,
    vllm_cpu_env,
    vllm_profiler,
)
from .base import ArgParser, EngineKind, PrefixReset, Profiler

RESET = PrefixReset("/reset_prefix_cache", "http", "VLLM_SERVER_DEV_MODE=1")
# the API server registers these only when a profiler is configured (vllm/entrypoints/serve/profile)
PROFILER = Profiler("/start_profile", "/stop_profile", "http", vllm_profiler)


def _process(e: EngineInput) -> ProcessSpec:
    model, s, role = e.doc["model"], e.slot, e.slot.worker.role
    # vLLM 0.32's own server entry (the openai.api_server module is deprecated; `vllm serve` reads
    # the package metadata "vllm", absent from the CPU build vllm-cpu)
    argv = [e.python, "-m", "vllm.entrypoints.launchers.api_server.entry", "--model", model["path"]]
    argv += ["--served-model-name", model["name"], "--host", "{addr:self}", "--port", "{port:self.http}"]
    argv += parallel_flags(role.tp, role.pp, role.dp)
    ports = {"http": e.alloc.take()}
    argv += multi_node_flags(e, ports, "master")  # vLLM's multiprocessing multi-node: rank 0 serves
    headless = s.parts > 1 and not s.leader
    if headless:
        argv.append("--headless")
    env = {**gpus_env(e), "VLLM_CACHE_ROOT": "{run_dir}/cache/vllm", "XDG_CACHE_HOME": "{run_dir}/cache"}
    env.update(vllm_cpu_env(e))
    if (e.doc.get("stack") or {}).get("reset_prefix_cache"):  # opt-in: dev mode opens admin endpoints too
        env["VLLM_SERVER_DEV_MODE"] = "1"  # POST /reset_prefix_cache between the points of a warm stack
    return _plain.spec(ports, argv + e.user_args, env, headless)


KIND = EngineKind(
    name="vllm",
    process=_process,
    dynamo=False,
    distributions=VLLM_DISTRIBUTIONS,
    metrics={
        # every finished request, whatever its finish reason (stop, length, abort, error)
        "worker_requests": {"metric": "vllm:request_success_total", "labels": {}},
        "ttft": {"histogram": "vllm:time_to_first_token_seconds", "source": "workers"},
        "prefix_cache": {**VLLM_PREFIX_CACHE, "source": "workers"},
        "batch": VLLM_BATCH,
        "spec_decode": VLLM_SPEC_DECODE,
    },
    parser=ArgParser("vllm_serve", "", "vllm"),
    prefix_reset=RESET,
    profiler=PROFILER,
    problems=_plain.problems("vllm"),
    rehearsal_flags=VLLM_REHEARSED,
)

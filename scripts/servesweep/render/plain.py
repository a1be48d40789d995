"""Engines served without Dynamo: vLLM's and SGLang's own OpenAI servers.

Several replicas sit behind the stack's nginx (``plan.balancer``); a worker wider than one
node runs one process per node, rank 0 serving and the others headless.
"""

from __future__ import annotations

from .engines import (
    EngineInput,
    ProcessSpec,
    http_urls,
    multi_node_flags,
    parallel_flags,
    sglang_parallel_flags,
    vllm_cpu_env,
)


def plain_process(e: EngineInput) -> ProcessSpec:
    return {"vllm": _vllm, "sglang": _sglang}[e.kind](e)


def _vllm(e: EngineInput) -> ProcessSpec:
    model, s, role = e.doc["model"], e.slot, e.slot.worker.role
    # vLLM 0.32's own server entry (the openai.api_server module is deprecated; `vllm serve` reads
    # the package metadata "vllm", absent from the CPU build vllm-cpu)
    argv = [e.python, "-m", "vllm.entrypoints.launchers.api_server.entry", "--model", model["path"]]
    argv += ["--served-model-name", model["name"], "--host", "{addr:self}", "--port", "{port:self.http}"]
    argv += parallel_flags(role.tp, role.pp, role.dp)
    ports = {"http": e.alloc.take()}
    argv += multi_node_flags(e, ports, "vllm")  # vLLM's multiprocessing multi-node: rank 0 serves
    headless = s.parts > 1 and not s.leader
    if headless:
        argv.append("--headless")
    env = {
        "CUDA_VISIBLE_DEVICES": ",".join(map(str, s.gpus)),
        "VLLM_CACHE_ROOT": "{run_dir}/cache/vllm",
        "XDG_CACHE_HOME": "{run_dir}/cache",
    }
    env.update(vllm_cpu_env(e))
    if (e.doc.get("stack") or {}).get("reset_prefix_cache"):  # opt-in: dev mode opens admin endpoints too
        env["VLLM_SERVER_DEV_MODE"] = "1"  # POST /reset_prefix_cache between the points of a warm stack
    return _spec(ports, argv + e.user_args, env, headless)


def _sglang(e: EngineInput) -> ProcessSpec:
    model, s, role = e.doc["model"], e.slot, e.slot.worker.role
    argv = [e.python, "-m", "sglang.launch_server", "--model-path", model["path"]]
    argv += ["--served-model-name", model["name"], "--host", "{addr:self}", "--port", "{port:self.http}"]
    argv += sglang_parallel_flags(role) + ["--enable-metrics"]
    ports = {"http": e.alloc.take()}
    argv += multi_node_flags(e, ports, "sglang")
    env = {"CUDA_VISIBLE_DEVICES": ",".join(map(str, s.gpus)), "XDG_CACHE_HOME": "{run_dir}/cache"}
    return _spec(ports, argv + e.user_args, env, s.parts > 1 and not s.leader)


def _spec(ports: dict, argv: list[str], env: dict, headless: bool) -> ProcessSpec:
    if headless:
        return ProcessSpec(ports, tuple(argv), env, None, None, {}, True)
    return ProcessSpec(ports, tuple(argv), env, *http_urls())

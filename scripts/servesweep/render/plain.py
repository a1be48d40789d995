"""Engines served without Dynamo: vLLM's and SGLang's own OpenAI servers.

Several replicas sit behind the stack's nginx (``plan.balancer``); a worker wider than one
node runs one process per node, rank 0 serving and the others headless.
"""

from __future__ import annotations

from .engines import EngineInput, ProcessSpec, http_urls, parallel_flags, vllm_cpu_env


def plain_process(e: EngineInput) -> ProcessSpec:
    return {"vllm": _vllm, "sglang": _sglang}[e.kind](e)


def _vllm(e: EngineInput) -> ProcessSpec:
    model, s, role = e.doc["model"], e.slot, e.slot.worker.role
    argv = [e.python, "-m", "vllm.entrypoints.openai.api_server", "--model", model["path"]]
    argv += ["--served-model-name", model["name"], "--host", "{addr:self}", "--port", "{port:self.http}"]
    argv += parallel_flags(role.tp, role.pp, role.dp)
    ports = {"http": e.alloc.take()}
    if s.parts > 1:  # vLLM's multiprocessing multi-node: rank 0 serves, the other nodes are headless
        if s.leader:
            ports["dist_init"] = e.alloc.take()
        leader = e.shared.leader
        argv += ["--nnodes", str(s.parts), "--node-rank", str(s.part)]
        argv += ["--master-addr", f"{{addr:{leader}}}", "--master-port", f"{{port:{leader}.dist_init}}"]
        if not s.leader:
            argv.append("--headless")
    env = {
        "CUDA_VISIBLE_DEVICES": ",".join(map(str, s.gpus)),
        "VLLM_SERVER_DEV_MODE": "1",  # POST /reset_prefix_cache between the points of a warm stack
        "VLLM_CACHE_ROOT": "{run_dir}/cache/vllm",
        "XDG_CACHE_HOME": "{run_dir}/cache",
    }
    env.update(vllm_cpu_env(e))
    headless = s.parts > 1 and not s.leader
    return _spec(ports, argv + e.user_args, env, headless)


def _sglang(e: EngineInput) -> ProcessSpec:
    model, s, role = e.doc["model"], e.slot, e.slot.worker.role
    argv = [e.python, "-m", "sglang.launch_server", "--model-path", model["path"]]
    argv += ["--served-model-name", model["name"], "--host", "{addr:self}", "--port", "{port:self.http}"]
    argv += ["--tp-size", str(role.tp), "--dp-size", str(role.dp), "--enable-metrics"]
    if role.ep:
        argv += ["--ep-size", str(role.tp * role.dp)]
    ports = {"http": e.alloc.take()}
    if s.parts > 1:
        if s.leader:
            ports["dist_init"] = e.alloc.take()
        leader = e.shared.leader
        argv += ["--nnodes", str(s.parts), "--node-rank", str(s.part)]
        argv += ["--dist-init-addr", f"{{addr:{leader}}}:{{port:{leader}.dist_init}}"]
    env = {"CUDA_VISIBLE_DEVICES": ",".join(map(str, s.gpus)), "XDG_CACHE_HOME": "{run_dir}/cache"}
    return _spec(ports, argv + e.user_args, env, s.parts > 1 and not s.leader)


def _spec(ports: dict, argv: list[str], env: dict, headless: bool) -> ProcessSpec:
    if headless:
        return ProcessSpec(ports, tuple(argv), env, None, None, {}, True)
    return ProcessSpec(ports, tuple(argv), env, *http_urls())

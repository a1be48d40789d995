"""Dynamo's TensorRT-LLM backend (its ``backend_args``). TRT-LLM spans nodes through MPI
(trtllm-llmapi-launch), which servesweep does not launch: a worker is one process on one node."""

from __future__ import annotations

from ..engines import EngineInput
from . import _dynamo
from .base import ArgParser, EngineKind, Findings


def _render(e: EngineInput, ports: dict, env: dict) -> tuple[list[str], bool]:
    model, role = e.doc["model"], e.slot.worker.role
    argv = [e.python, "-m", "dynamo.trtllm", "--model-path", model["path"], "--served-model-name", model["name"]]
    argv += e.planes.flags() + ["--tensor-parallel-size", str(role.tp)]
    if role.pp > 1:
        argv += ["--pipeline-parallel-size", str(role.pp)]
    if role.ep:
        argv += ["--expert-parallel-size", str(role.tp)]
    if e.kv_router:  # KV events reach the router over the event plane, no port of their own
        argv.append("--publish-kv-events")
    return argv + _dynamo.role_flags(e) + e.user_args, False


def _problems(recipe) -> Findings:
    """Attention DP is the engine's flag here, not topology dp."""
    reason = "dynamo.trtllm: set --enable-attention-dp in args; topology dp must be 1"
    return [(f"{r.field}.dp", reason) for r in recipe.roles() if r.dp > 1]


def _placement(slots, cluster: str) -> Findings:
    wide = sorted({s.worker.role.field for s in slots if s.parts > 1})
    reason = f"dynamo.trtllm workers must fit one node of {cluster!r} (multi-node MPI launch is not supported)"
    return [(f, reason) for f in wide]


KIND = EngineKind(
    name="dynamo.trtllm",
    process=_dynamo.process(_render),
    dynamo=True,
    distributions=("tensorrt-llm", "tensorrt_llm"),
    metrics={**_dynamo.METRICS, "batch": None},  # exports no running-requests gauge here
    parser=ArgParser("parse_args", "dynamo.trtllm.args", "ai-dynamo"),
    kv_events_per_replica=True,
    problems=_problems,
    placement_problems=_placement,
    # TRT-LLM's batch limits, as the mocker simulates them
    rehearsal_flags={"--max-num-tokens": "--max-num-batched-tokens", "--max-batch-size": "--max-num-seqs"},
)

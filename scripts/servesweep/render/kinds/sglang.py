"""SGLang's own server (``sglang.launch_server``), without Dynamo."""

from __future__ import annotations

from ..engines import EngineInput, ProcessSpec
from . import _plain
from ._common import SGLANG_BATCH, SGLANG_REHEARSED, gpus_env, multi_node_flags, sglang_parallel_flags
from .base import ArgParser, EngineKind, Profiler


def _profiler_env(capture: str, trace_dir: str, steps: int | None) -> tuple[list[str], dict]:
    return [], {"SGLANG_TORCH_PROFILER_DIR": trace_dir}


def _start_body(capture: str, trace_dir: str, steps: int | None) -> dict:
    """SGLang's /start_profile request: its folder, its step count, CUDA_PROFILER for an nsys capture range."""
    body = {"output_dir": trace_dir, "activities": ["CPU", "GPU"] if capture == "torch" else ["CUDA_PROFILER"]}
    return body | ({"num_steps": steps} if steps else {})


PROFILER = Profiler("/start_profile", "/stop_profile", "http", _profiler_env, _start_body, steps_at_start=False)


def _process(e: EngineInput) -> ProcessSpec:
    model, s, role = e.doc["model"], e.slot, e.slot.worker.role
    argv = [e.python, "-m", "sglang.launch_server", "--model-path", model["path"]]
    argv += ["--served-model-name", model["name"], "--host", "{addr:self}", "--port", "{port:self.http}"]
    argv += sglang_parallel_flags(role) + ["--enable-metrics"]
    ports = {"http": e.alloc.take()}
    argv += multi_node_flags(e, ports, "dist-init")
    env = {**gpus_env(e), "XDG_CACHE_HOME": "{run_dir}/cache"}
    return _plain.spec(ports, argv + e.user_args, env, s.parts > 1 and not s.leader)


KIND = EngineKind(
    name="sglang",
    process=_process,
    dynamo=False,
    distributions=("sglang",),
    metrics={
        "worker_requests": {"metric": "sglang:num_requests_total", "labels": {}},
        "ttft": {"histogram": "sglang:time_to_first_token_seconds", "source": "workers"},
        "prefix_cache": None,  # SGLang exports a hit-rate gauge, not counters: the responses' figure is used
        "batch": SGLANG_BATCH,
    },
    parser=ArgParser("sglang_server_args", "", "sglang"),
    problems=_plain.problems("sglang"),
    profiler=PROFILER,
    rehearsal_flags=SGLANG_REHEARSED,
)

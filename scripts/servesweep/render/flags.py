"""Flags and env the launcher owns for every kind (rejected in user args, with the reason; each kind
adds its own), and argv scanning."""

from __future__ import annotations

from . import kinds
from .engines import REQUEST_PLANE_TLS
from .kinds._common import MOCKER_SWITCHES, MOCKER_UNLIMITED
from .kinds.dynamo_frontend import FRONTEND

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
# one publisher per process: a second config would win (the last flag) and bind a port outside the plan
_KV_EVENTS = "it gives each process one KV-event endpoint on loopback, from the port plan, when the router is kv"
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
    "--data-parallel-hybrid-lb": _DP,
    "--nnodes": _DP,
    "--node-rank": _DP,
    "--dist-init-addr": _DP,
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
OWNED_ENV = frozenset(
    {
        "CUDA_VISIBLE_DEVICES",
        "DYN_SYSTEM_PORT",
        "DYN_SYSTEM_HOST",
        "DYN_SYSTEM_ENABLED",
        "DYN_FILE_KV",
        "DYN_NAMESPACE",
        "ETCD_ENDPOINTS",
        "ETCD_AUTH_USERNAME",
        "ETCD_AUTH_PASSWORD",
        "NATS_SERVER",
        "NATS_AUTH_USERNAME",
        "NATS_AUTH_PASSWORD",
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
        *REQUEST_PLANE_TLS,
        "DYN_TCP_TLS_INSECURE",
    }
)


def owned_env(kind_name: str) -> frozenset[str]:
    return OWNED_ENV | kinds.get(kind_name).owned_env


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


def rehearsal_args(kind_name: str, args: list) -> list[str]:
    """The engine arguments a rehearsal keeps: the kind's scheduler limits the stand-in simulates,
    renamed to its flags (vLLM's underscore spellings too). A switch keeps no value; a limit at zero or
    below (SGLang's -1) means unlimited where the stand-in has a way to say so, else its default."""
    keep, out = kinds.get(kind_name).rehearsal_flags, []
    for flag, value, _ in iter_flags(args):
        target = keep.get(flag.replace("_", "-"))
        if target is None:
            continue
        if target in MOCKER_SWITCHES:  # the token after a switch is another argument
            out.append(target)
            continue
        limit = _integer(value)
        if limit is not None and limit > 0:
            out += [target, str(limit)]
        elif limit is not None and target in MOCKER_UNLIMITED:
            out.append(MOCKER_UNLIMITED[target])
    return out


def _integer(value: str | None) -> int | None:
    """A limit's value, None when it is no integer (the engine's own argument check refuses it)."""
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def owned_match(flag: str, owned: dict) -> tuple[str, str] | None:
    """(owned flag, why) if ``flag`` is one, or an abbreviation of one: the engines' argparse parsers
    expand unique prefixes (`--http-h` is `--http-host`), so a prefix of an owned flag is refused too,
    whether or not a parser checks the recipe (no other flag of theirs is a prefix of an owned one)."""
    if flag in owned:
        return flag, owned[flag]
    if flag.startswith("--") and len(flag) >= 4:
        full = sorted(f for f in owned if f.startswith(flag))
        if full:
            return full[0], f"{flag} abbreviates {' / '.join(full)}, which the engine's parser would accept; " + owned[
                full[0]
            ]
    return None


def owned_flag_problems(kind_name: str, args: list, field: str) -> list[tuple[str, str]]:
    kind, out = kinds.get(kind_name), []
    owned = {**_ENGINE_OWNED, **kind.owned_flags}
    if kind.kv_events_per_replica:
        owned["--kv-events-config"] = _KV_EVENTS
    for flag, _, i in iter_flags(args):
        hit = owned_match(flag, owned)
        if hit:
            out.append((f"{field}[{i}]", f"{hit[0]} is owned by the launcher: {hit[1]}"))
    return out


def owned_frontend_flag_problems(args: list) -> list[tuple[str, str]]:
    hits = [(i, owned_match(flag, FRONTEND.owned_flags)) for flag, _, i in iter_flags(args)]
    return [(f"frontend.args[{i}]", f"{h[0]} is owned by the launcher: {h[1]}") for i, h in hits if h]

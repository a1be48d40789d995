"""Every port a stack process listens on, as docs/security.md's port table lists it: one home.

The table in the doc is :func:`markdown` verbatim (a test compares them); a test proves that every
port a rendered plan gives a process has its row (:func:`unlisted_plan_ports`), and the live audit
(tests/test_security.py) holds every listener a running stack shows to it (:func:`unlisted`).
Ports the plan gives are below ``PORT_LIMIT``; a ``kernel`` row is a port the kernel picks (the
ephemeral range, above it), ``kernel`` of them at most per process.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..contract.plan import TELEMETRY_ROLE
from . import kinds
from .ports import PORT_LIMIT

NODE, LOOPBACK, EVERY = "node", "127.0.0.1", "every interface"
_ADDRESSES = {LOOPBACK: ("127.0.0.1", "::1"), EVERY: ("0.0.0.0", "::")}


@dataclass(frozen=True)
class Listener:
    process: str  # as the table names it (see table_processes)
    port: str
    binds: str  # NODE | LOOPBACK | EVERY
    carries: str
    who: str  # who may use it
    keys: tuple[str, ...] = ()  # the plan's port names this row covers ("*": every one)
    kernel: int = 0  # kernel-assigned ports of this row per process (0: ports of the plan)
    event_plane: str | None = None  # the row exists only with this event plane
    for_process: str | None = None  # the plan gives the port to this process; the row's process binds it

    def binds_on(self, ip: str, node_addr: str) -> bool:
        return ip == node_addr if self.binds == NODE else ip in _ADDRESSES[self.binds]


_CERT = "holders of the stack's certificate"
_NET = "the cluster network: no authentication upstream"
LISTENERS = (
    Listener("etcd", "client", NODE, "discovery keys and leases; mutual TLS", _CERT, ("client",)),
    Listener("etcd", "peer", LOOPBACK, "nothing (one member); mutual TLS", _CERT, ("peer",)),
    Listener(
        "NATS", "client", NODE, "the NATS event plane; user + password", "holders of the stack's password", ("client",)
    ),
    Listener(
        "frontend",
        "http (OpenAI API, /health, /metrics)",
        NODE,
        "the benchmark's requests and answers",
        "anyone: the service under test; foreign load is caught by the gate",
        ("http",),
    ),
    Listener(
        "frontend",
        "TCP response stream (kernel-assigned)",
        NODE,
        "workers' answers; mutual TLS",
        f"{_CERT} (unless `request_plane_tls: false`)",
        kernel=1,
    ),
    Listener(
        "frontend",
        "ZMQ event-plane publisher (kernel-assigned)",
        EVERY,
        "`session_affinity_events`: each client session id and the worker it is pinned to",
        "anyone on the network (Dynamo binds it on 0.0.0.0; gone with `event_plane: nats`)",
        kernel=1,
        event_plane="zmq",
    ),
    Listener(
        "nginx", "http (several frontends)", NODE, "the benchmark's requests", "anyone, as the frontend", ("http",)
    ),
    Listener(
        "Dynamo worker",
        "system_local (admin routes)",
        LOOPBACK,
        "health, metrics, /engine/control/*",
        "same-host processes (see above)",
        ("system_local",),
    ),
    Listener(
        "sysguard",
        "system (per worker: GET /health, /live, /metrics)",
        NODE,
        "a worker's health and metrics",
        "anyone; nothing else passes",
        ("system",),
        for_process="Dynamo worker",
    ),
    Listener(
        "Dynamo worker",
        "TCP request plane (kernel-assigned)",
        NODE,
        "requests to the worker; mutual TLS",
        f"{_CERT} (unless `request_plane_tls: false`)",
        kernel=2,
    ),
    Listener(
        "Dynamo worker",
        "ZMQ event plane (4, kernel-assigned)",
        EVERY,
        "KV-cache events, load metrics",
        "anyone (Dynamo 1.6.1 ignores `DYN_EVENT_PLANE_HOST`; gone with `event_plane: nats`)",
        kernel=4,
        event_plane="zmq",
    ),
    Listener("vLLM", "kv_events publisher", LOOPBACK, "KV-cache events", "same-host processes", ("kv_events",)),
    Listener(
        "vLLM",
        "nixl side channel, dp_rpc (DP rank 0)",
        NODE,
        "KV transfer handshakes, DP coordination",
        "the cluster network: vLLM has no authentication for them",
        ("nixl", "dp_rpc"),
    ),
    Listener(
        "prefill worker (SGLang, mocker)",
        "bootstrap (disaggregation)",
        NODE,
        "KV transfer handshakes",
        _NET,
        ("bootstrap",),
    ),
    Listener(
        "multi-node engine",
        "dist_init (rendezvous on the leader)",
        NODE,
        "the engine's own setup",
        _NET,
        ("dist_init",),
    ),
    Listener(
        "plain vLLM / SGLang",
        "http",
        NODE,
        "the benchmark's requests and answers",
        "anyone, as the frontend",
        ("http",),
    ),
    Listener(
        "mooncake_master",
        "rpc, metadata, metrics",
        NODE,
        "the KV store's placement and metadata",
        _NET,
        ("rpc", "metadata", "metrics"),
    ),
    Listener(
        "GPU telemetry exporter", "metrics", NODE, "GPU power and use", "anyone on the cluster network", ("metrics",)
    ),
    Listener("rehearsal stand-in", "a headless engine's ports", NODE, "nothing (holds the ports)", "no one", ("*",)),
)

_BINARIES = {"etcd": "etcd", "nats-server": "NATS", "nginx": "nginx", "mooncake_master": "mooncake_master"}
_ROLES = {"etcd": "etcd", "nats": "NATS", "frontend": "frontend", "balancer": "nginx", "sysguard": "sysguard",
          "kvstore": "mooncake_master", TELEMETRY_ROLE: "GPU telemetry exporter"}  # fmt: skip
# An engine's own ports (by port name; a mocker keeps its engine's kv_events block free, binding nothing)
_ENGINE_ROWS = ("vLLM", "prefill worker (SGLang, mocker)", "multi-node engine")
_MODULES = (  # (program prefix, table processes) of what is not an engine kind's own module
    ("dynamo.frontend", ("frontend",)),
    ("servesweep.run.standin", ("rehearsal stand-in",)),
    ("mooncake.mooncake_master", ("mooncake_master",)),
    ("vllm.entrypoints", ("plain vLLM / SGLang", *_ENGINE_ROWS)),
    ("sglang.launch_server", ("plain vLLM / SGLang", *_ENGINE_ROWS)),
)


def program(argv: list[str] | tuple[str, ...]) -> str:
    """What a command runs: the module of ``python -m X``, a script's or a binary's file name."""
    argv = list(argv)
    if argv and argv[0].startswith("nginx:"):  # nginx renames its processes ("nginx: master process …")
        return "nginx"
    if "-m" in argv[:3]:
        return argv[argv.index("-m") + 1]
    if len(argv) > 1 and argv[1].endswith("preamble.py") and "--" in argv:  # a Slurm worker's setup, then it
        return program(argv[argv.index("--") + 1 :])
    script = next((a for a in argv[1:2] if a.endswith(".py")), argv[0] if argv else "")
    return script.rsplit("/", 1)[-1]


def table_processes(argv, role: str | None = None) -> tuple[str, ...]:
    """The table's process names a command (with its plan role, where known) stands for; () if none."""
    name = program(argv)
    if name == "sysguard.py":
        return ("sysguard",)
    if name in _BINARIES:
        return (_BINARIES[name],)
    found = next((procs for prefix, procs in _MODULES if name.startswith(prefix)), None)
    if found:
        return found
    if name in kinds.names():  # an engine kind's own module (``python -m dynamo.<engine>``)
        return ("Dynamo worker" if kinds.get(name).dynamo else "plain vLLM / SGLang", *_ENGINE_ROWS)
    return (_ROLES[role],) if role in _ROLES else ()


def _covers(row: Listener, procs: tuple[str, ...], key: str) -> bool:
    owner = row.for_process or row.process
    return owner in procs and ("*" in row.keys or key in row.keys)


def unlisted_plan_ports(plan: dict) -> list[str]:
    """Ports a rendered plan gives a process that no row of the table lists."""
    out = []
    for p in plan["processes"]:
        procs = table_processes(p["argv"], p["role"])
        for key in p["ports"]:
            if any(_covers(r, procs, key) for r in LISTENERS):
                continue
            out.append(f"{p['name']} ({program(p['argv'])}): port {key!r} is not in docs/security.md's port table")
    return out


def unlisted(argv, listening: list[tuple[str, int]], event_plane: str, node_addr: str) -> list[str]:
    """What one live process listens on (address, port) that the table does not list for it, or more
    kernel-assigned ports of a row than the row says."""
    procs = table_processes(argv)
    rows = [r for r in LISTENERS if r.process in procs and r.event_plane in (None, event_plane)]
    left = {r: r.kernel for r in rows}
    out = []
    for ip, port in sorted(listening, key=lambda a: (a[1] < PORT_LIMIT, a)):  # kernel-assigned first
        kernel = port >= PORT_LIMIT
        fits = [r for r in rows if r.binds_on(ip, node_addr) and bool(r.kernel) == kernel]
        fits = [r for r in fits if not kernel or left[r] > 0]
        if not fits:
            what = program(argv) or "?"
            out.append(f"{what} listens on {ip}:{port}: not in docs/security.md's port table for {procs or what}")
        elif kernel:
            left[fits[0]] -= 1
    return out


def markdown() -> str:
    """The port table as docs/security.md holds it."""
    lines = ["| process | port | binds | carries | who may use it |", "|---|---|---|---|---|"]
    for r in LISTENERS:
        lines.append(f"| {r.process} | {r.port} | {r.binds} | {r.carries} | {r.who} |")
    return "\n".join(lines) + "\n"

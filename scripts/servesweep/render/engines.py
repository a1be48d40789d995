"""What every process of a stack is rendered from and into (the kinds in ``kinds/`` fill it in),
and the control-plane processes: etcd, NATS, nginx.

Strings in argv/env may hold runtime references the run side resolves when it
spawns (see ``contract``): ``{addr:NAME}`` (node address of process NAME, ``self``
for itself), ``{port:NAME.PORT}`` (the port, or a block's base),
``{rank_port:NAME.PORT}`` (the first port of a block this process binds),
``{namespace}``, ``{job_id}``, ``{run_dir}``, ``{servesweep_python}``.
Everything else is final.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..contract.paths import TLS_CA, TLS_CERT, TLS_DIR, TLS_KEY
from ..contract.plan import TLS_PEM_REFS, PortBlock
from .ports import PortAllocator

if TYPE_CHECKING:  # for annotations only
    from .topology import Slot


@dataclass(frozen=True)
class ProcessSpec:
    """What engines decide about one process; plan.py adds identity and placement."""

    ports: dict[str, PortBlock]
    argv: tuple[str, ...]
    env: dict
    health_url: str | None
    metrics_url: str | None
    registers: dict = field(default_factory=dict)  # frontend component -> instances this process adds
    headless: bool = False


# Mutual TLS on the TCP request plane with the stack's own CA (the driver makes it at start,
# run/credentials.make_tls): every process serves and dials it, so each has both halves
_TLS = "{run_dir}/" + TLS_DIR
REQUEST_PLANE_TLS = {
    "DYN_TCP_TLS_CERT_PATH": f"{_TLS}/{TLS_CERT}",
    "DYN_TCP_TLS_KEY_PATH": f"{_TLS}/{TLS_KEY}",
    "DYN_TCP_TLS_CA_CERT_PATH": f"{_TLS}/{TLS_CA}",
    "DYN_TCP_TLS_CLIENT_CA_CERT_PATH": f"{_TLS}/{TLS_CA}",
    "DYN_TCP_TLS_CLIENT_CERT_PATH": f"{_TLS}/{TLS_CERT}",
    "DYN_TCP_TLS_CLIENT_KEY_PATH": f"{_TLS}/{TLS_KEY}",
}
# etcd asks every client for a certificate of the stack's CA (--client-cert-auth): its key-value,
# lease, maintenance and member APIs, /health and /metrics alike (a user/password leaves the lease
# and maintenance APIs open). Dynamo reads these three as PEM text, not paths (ClientOptions in
# dynamo-runtime's etcd transport), so they come from the stack like a password.
ETCD_CLIENT_TLS = {
    var: {"from_stack": ref}
    for var, ref in zip(("ETCD_AUTH_CA", "ETCD_AUTH_CLIENT_CERT", "ETCD_AUTH_CLIENT_KEY"), TLS_PEM_REFS, strict=True)
}
NATS_USER = "servesweep"


@dataclass(frozen=True)
class Planes:
    """How one stack's processes find each other: a discovery backend and an event plane.

    ``file`` discovery works on one host only (Dynamo's file store learns of keys by
    inotify, which never hears of files written on another NFS/Lustre client); across
    nodes the stack runs its own etcd on node 0. Every stack has its own namespace.
    """

    discovery: str  # file | etcd
    event_plane: str  # zmq | nats
    tls: bool = True  # mutual TLS on the request plane (cluster fact control_plane.request_plane_tls)

    def flags(self) -> list[str]:
        return ["--discovery-backend", self.discovery, "--request-plane", "tcp", "--event-plane", self.event_plane]

    def env(self) -> dict:
        env = {"DYN_NAMESPACE": "{namespace}", **(REQUEST_PLANE_TLS if self.tls else {})}
        if self.discovery == "file":
            env["DYN_FILE_KV"] = "{run_dir}/discovery"
        else:  # the stack's own etcd: mutual TLS with the stack's certificate, for every call
            env["ETCD_ENDPOINTS"] = "https://{addr:etcd}:{port:etcd.client}"
            env |= ETCD_CLIENT_TLS
        if self.event_plane == "nats":
            env["NATS_SERVER"] = "nats://{addr:nats}:{port:nats.client}"
            env["NATS_AUTH_USERNAME"] = NATS_USER
            env["NATS_AUTH_PASSWORD"] = {"from_stack": "nats_password"}
        return env


@dataclass(frozen=True)
class WorkerPorts:
    """Ports one logical worker's processes share: blocks of DP size an engine offsets by
    the DP rank, and the DP RPC port its rank-0 process binds."""

    kv_events: PortBlock | None
    nixl: PortBlock | None
    dp_rpc: PortBlock | None
    leader: str  # the process hosting DP rank 0

    @classmethod
    def take(cls, alloc: PortAllocator, dp: int, kv: bool, nixl: bool, rpc: bool, leader: str) -> WorkerPorts:
        return cls(
            alloc.take(dp) if kv else None, alloc.take(dp) if nixl else None, alloc.take() if rpc else None, leader
        )


@dataclass(frozen=True)
class EngineInput:
    """Everything an engine function needs to render one process of a worker."""

    kind: str
    doc: dict  # the placeholder-filled recipe
    slot: Slot
    python: str
    alloc: PortAllocator
    kv_router: bool
    planes: Planes
    shared: WorkerPorts
    cpu: dict | None = None  # the cluster's cpu_engine facts: engines on CPU cores

    @property
    def user_args(self) -> list[str]:
        return [str(a) for a in self.doc["engine"].get("args", [])] + [str(a) for a in self.slot.worker.role.args]

    @property
    def disagg(self) -> bool:
        return self.slot.worker.role.name in ("prefill", "decode")


def http_urls(port: str = "http") -> tuple[str, str]:
    base = f"http://{{addr:self}}:{{port:self.{port}}}"
    return f"{base}/health", f"{base}/metrics"


def host_env() -> dict:
    return {
        "DYN_TCP_RPC_HOST": "{addr:self}",
        "DYN_TCP_RESPONSE_STREAM_HOST": "{addr:self}",
        "DYN_EVENT_PLANE_HOST": "{addr:self}",
        "DYN_SYSTEM_HOST": "{addr:self}",
        "DYN_HTTP_RPC_HOST": "{addr:self}",  # the address a prefill worker advertises for bootstrap
        "XDG_CACHE_HOME": "{run_dir}/cache",
    }


def etcd(binary: str, alloc: PortAllocator) -> ProcessSpec:
    """A one-member etcd: clients over mutual TLS only, the peer port on loopback (no peer to reach)."""
    url = "https://{addr:self}:{port:self.client}"
    peer = "https://127.0.0.1:{port:self.peer}"
    argv = [binary, "--name", "servesweep", "--data-dir", "{run_dir}/etcd", "--listen-client-urls", url]
    argv += ["--advertise-client-urls", url, "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer]
    argv += ["--initial-cluster", f"servesweep={peer}", "--log-level", "warn"]
    for side in ("", "peer-"):  # both listeners ask for the stack's certificate
        argv += [f"--{side}cert-file", f"{_TLS}/{TLS_CERT}", f"--{side}key-file", f"{_TLS}/{TLS_KEY}"]
        argv += [f"--{side}client-cert-auth", f"--{side}trusted-ca-file", f"{_TLS}/{TLS_CA}"]
    ports = {"client": alloc.take(), "peer": alloc.take()}
    return ProcessSpec(ports, tuple(argv), {}, f"{url}/health", f"{url}/metrics")


def nats(binary: str, alloc: PortAllocator) -> ProcessSpec:
    """NATS with the stack's user: the driver writes its password into a 0600 config file, never argv.
    No monitor port (it has no authentication and lists every connection's user and subjects):
    readiness is NATS's own greeting on the client port."""
    argv = [binary, "-a", "{addr:self}", "-p", "{port:self.client}"]
    argv += ["-js", "-sd", "{run_dir}/nats", "-c", "{run_dir}/nats-auth.conf"]
    return ProcessSpec({"client": alloc.take()}, tuple(argv), {}, "nats://{addr:self}:{port:self.client}", None)


def balancer(binary: str, alloc: PortAllocator) -> ProcessSpec:
    """nginx in front of several frontends; the driver writes its config from the plan's ``balancer``."""
    argv = [binary, "-p", "{run_dir}/balancer", "-c", "{run_dir}/balancer/nginx.conf", "-e", "stderr"]
    base = "http://{addr:self}:{port:self.http}"
    return ProcessSpec({"http": alloc.take()}, tuple(argv), {}, f"{base}/servesweep-health", None)


GUARDED_PORT = "system_local"  # a process's port that only its node's sysguard reaches (on loopback)
SYSGUARD = "{workdir}/scripts/servesweep/run/sysguard.py"


def system_guards(procs: list, python: str, rehearsal: bool) -> list[tuple[int, ProcessSpec]]:
    """(node, spec) of one sysguard per node for the processes whose system server sits on loopback
    behind it: it serves their read-only routes on their public ``system`` port (run/sysguard).
    Rehearsal's headless stand-ins serve nothing (they only hold their ports)."""
    routes: dict[int, list[str]] = {}
    for p in procs:
        if GUARDED_PORT in p.ports and not (rehearsal and p.headless):
            n = p.name
            routes.setdefault(p.node, []).append(f"{{addr:{n}}}:{{port:{n}.system}}={{port:{n}.{GUARDED_PORT}}}")
    return [(node, ProcessSpec({}, (python, SYSGUARD, *r), {}, None, None)) for node, r in sorted(routes.items())]


def standin_process(spec: ProcessSpec) -> ProcessSpec:
    """Rehearsal stand-in for a headless engine process: binds its ports, serves nothing."""
    argv = ["{servesweep_python}", "-m", "servesweep.run.standin", "--ports"]
    argv += [f"{{rank_port:self.{name}}}:{b.width}" for name, b in spec.ports.items()]
    return ProcessSpec(spec.ports, tuple(argv), spec.env, None, None, {}, True)

"""Per engine kind: the argv and env of a process, its ports, health and registrations.

Strings in argv/env may hold runtime references the run side resolves when it
spawns (see ``contract``): ``{addr:NAME}`` (node address of process NAME, ``self``
for itself), ``{port:NAME.PORT}`` (the port, or a block's base),
``{rank_port:NAME.PORT}`` (the first port of a block this process binds),
``{namespace}``, ``{job_id}``, ``{run_dir}``, ``{servesweep_python}``.
Everything else is final.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from ..contract import PortBlock
from ..encode import num_arg
from .ports import PortAllocator, ranks_of
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


ETCD_USER = "root"  # etcd enables auth only with a root user; each stack's etcd is its own
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

    def flags(self) -> list[str]:
        return ["--discovery-backend", self.discovery, "--request-plane", "tcp", "--event-plane", self.event_plane]

    def env(self) -> dict:
        env = {"DYN_NAMESPACE": "{namespace}"}
        if self.discovery == "file":
            env["DYN_FILE_KV"] = "{run_dir}/discovery"
        else:  # the stack's own etcd, with the credential the driver makes when it starts the stack
            env["ETCD_ENDPOINTS"] = "http://{addr:etcd}:{port:etcd.client}"
            env["ETCD_AUTH_USERNAME"] = ETCD_USER
            env["ETCD_AUTH_PASSWORD"] = {"from_stack": "etcd_password"}
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


def shares_ports(kind: str, kv_router: bool, disagg: bool, multi_process_dp: bool) -> tuple[bool, bool, bool]:
    """(KV-event block, NIXL block, DP RPC port) a worker of this engine kind needs."""
    if kind == "dynamo.vllm":
        return kv_router, disagg, multi_process_dp
    if kind == "dynamo.mocker":
        return kv_router, False, False
    return False, False, False


def http_urls(port: str = "http") -> tuple[str, str]:
    base = f"http://{{addr:self}}:{{port:self.{port}}}"
    return f"{base}/health", f"{base}/metrics"


def _host_env() -> dict:
    return {
        "DYN_TCP_RPC_HOST": "{addr:self}",
        "DYN_TCP_RESPONSE_STREAM_HOST": "{addr:self}",
        "DYN_EVENT_PLANE_HOST": "{addr:self}",
        "DYN_SYSTEM_HOST": "{addr:self}",
        "DYN_HTTP_RPC_HOST": "{addr:self}",  # the address a prefill worker advertises for bootstrap
        "XDG_CACHE_HOME": "{run_dir}/cache",
    }


def frontend(recipe_doc: dict, python: str, alloc: PortAllocator, planes: Planes) -> ProcessSpec:
    fe = recipe_doc.get("frontend") or {}
    router = fe.get("router") or {}
    argv = [python, "-m", "dynamo.frontend", "--http-port", "{port:self.http}"]
    argv += ["--router-mode", router.get("mode", "kv"), "--namespace", "{namespace}"]
    if "min_initial_workers" in router:
        argv += ["--router-min-initial-workers", str(router["min_initial_workers"])]
    if "prefill_load_scale" in router:
        argv += ["--router-prefill-load-scale", num_arg(router["prefill_load_scale"])]
    aff = router.get("session_affinity")
    if aff:
        argv += ["--router-session-affinity-ttl-secs", str(aff["ttl_s"])]
        argv += ["--router-session-affinity-mode", aff.get("mode", "hard")]
    argv += planes.flags() + [str(a) for a in fe.get("args", [])]
    env = {**_host_env(), **planes.env(), "DYN_HTTP_HOST": "{addr:self}"}
    return ProcessSpec({"http": alloc.take()}, tuple(argv), env, *http_urls())


def etcd(binary: str, alloc: PortAllocator) -> ProcessSpec:
    url = "http://{addr:self}:{port:self.client}"
    peer = "http://{addr:self}:{port:self.peer}"
    argv = [binary, "--name", "servesweep", "--data-dir", "{run_dir}/etcd", "--listen-client-urls", url]
    argv += ["--advertise-client-urls", url, "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer]
    argv += ["--initial-cluster", f"servesweep={peer}", "--log-level", "warn"]
    ports = {"client": alloc.take(), "peer": alloc.take()}
    return ProcessSpec(ports, tuple(argv), {}, f"{url}/health", f"{url}/metrics")


def nats(binary: str, alloc: PortAllocator) -> ProcessSpec:
    """NATS with the stack's user: the driver writes its password into a 0600 config file, never argv."""
    argv = [binary, "-a", "{addr:self}", "-p", "{port:self.client}", "-m", "{port:self.monitor}"]
    argv += ["-js", "-sd", "{run_dir}/nats", "-c", "{run_dir}/nats-auth.conf"]
    ports = {"client": alloc.take(), "monitor": alloc.take()}
    mon = "http://{addr:self}:{port:self.monitor}"
    return ProcessSpec(ports, tuple(argv), {}, f"{mon}/healthz", f"{mon}/varz")


def balancer(binary: str, alloc: PortAllocator) -> ProcessSpec:
    """nginx in front of several frontends; the driver writes its config from the plan's ``balancer``."""
    argv = [binary, "-p", "{run_dir}/balancer", "-c", "{run_dir}/balancer/nginx.conf", "-e", "stderr"]
    base = "http://{addr:self}:{port:self.http}"
    return ProcessSpec({"http": alloc.take()}, tuple(argv), {}, f"{base}/servesweep-health", None)


def engine_process(e: EngineInput) -> ProcessSpec:
    render = {
        "dynamo.mocker": _mocker,
        "dynamo.vllm": _dynamo_vllm,
        "dynamo.sglang": _dynamo_sglang,
        "dynamo.trtllm": _dynamo_trtllm,
    }[e.kind]
    ports = {"system": e.alloc.take()}
    env = {**_host_env(), **e.planes.env(), "CUDA_VISIBLE_DEVICES": ",".join(map(str, e.slot.gpus))}
    env["DYN_SYSTEM_PORT"] = "{port:self.system}"
    env["DYN_SYSTEM_USE_ENDPOINT_HEALTH_STATUS"] = '["generate"]'
    argv, headless = render(e, ports, env)
    health, metrics = http_urls("system")
    component = "prefill" if e.slot.worker.role.name == "prefill" else "backend"
    if headless:
        return ProcessSpec(ports, tuple(argv), env, None, metrics, {}, True)
    return ProcessSpec(ports, tuple(argv), env, health, metrics, {component: 1})


def vllm_cpu_env(e: EngineInput) -> dict:
    """vLLM's CPU build pins every process's threads to core 0 unless told otherwise."""
    if not e.cpu:
        return {}
    core = str(e.slot.gpus[0] % e.cpu["cores"]) if e.slot.gpus else "0"
    return {"VLLM_CPU_OMP_THREADS_BIND": core, "VLLM_CPU_KVCACHE_SPACE": str(e.cpu.get("kvcache_gb", 1))}


def _own_ranks(e: EngineInput, block: PortBlock) -> PortBlock:
    return ranks_of(block, e.slot.dp_start, e.slot.dp_local)


def _mocker(e: EngineInput, ports: dict, env: dict) -> tuple[list[str], bool]:
    model, s = e.doc["model"], e.slot
    argv = [e.python, "-m", "dynamo.mocker", "--model-path", model["path"], "--model-name", model["name"]]
    argv += e.planes.flags()
    if s.dp_local > 1:
        argv += ["--data-parallel-size", str(s.dp_local)]
    if e.shared.kv_events:  # the mocker binds the port it is given + its local rank
        ports["kv_events"] = _own_ranks(e, e.shared.kv_events)
        argv += ["--zmq-kv-events-ports", "{rank_port:self.kv_events}"]
    if e.disagg:
        argv += ["--disaggregation-mode", s.worker.role.name]
    if s.worker.role.name == "prefill":
        ports["bootstrap"] = e.alloc.take()
        argv += ["--bootstrap-ports", "{port:self.bootstrap}"]
    return argv + e.user_args, False


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


def _dynamo_vllm(e: EngineInput, ports: dict, env: dict) -> tuple[list[str], bool]:
    model, s, role = e.doc["model"], e.slot, e.slot.worker.role
    argv = [e.python, "-m", "dynamo.vllm", "--model", model["path"], "--served-model-name", model["name"]]
    argv += e.planes.flags() + parallel_flags(role.tp, role.pp, role.dp)
    if role.ep:
        argv.append("--enable-expert-parallel")
    argv += _dp_flags(e)
    if s.leader and e.shared.dp_rpc:
        ports["dp_rpc"] = e.shared.dp_rpc
    if e.shared.kv_events:  # vLLM binds the endpoint's port + the DP rank
        ports["kv_events"] = _own_ranks(e, e.shared.kv_events)
        cfg = {
            "publisher": "zmq",
            "topic": "kv-events",
            # loopback only: dynamo.vllm subscribes on 127.0.0.1 in the same node, nobody else needs it
            "endpoint": "tcp://127.0.0.1:{port:self.kv_events}",
            "enable_kv_cache_events": True,
        }
        argv += ["--kv-events-config", json.dumps(cfg, separators=(",", ":"))]
    if e.disagg:
        argv += ["--disaggregation-mode", role.name]
    if e.shared.nixl:  # the NIXL side channel listens on this base + the DP rank
        ports["nixl"] = _own_ranks(e, e.shared.nixl)
        env["VLLM_NIXL_SIDE_CHANNEL_PORT"] = "{port:self.nixl}"
        env["VLLM_NIXL_SIDE_CHANNEL_HOST"] = "{addr:self}"
    env.update(vllm_cpu_env(e))
    return argv + e.user_args, False


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
    if rendezvous == "vllm":
        return flags + ["--master-addr", addr, "--master-port", port]
    return flags + ["--dist-init-addr", f"{addr}:{port}"]


def _dynamo_sglang(e: EngineInput, ports: dict, env: dict) -> tuple[list[str], bool]:
    model, s, role = e.doc["model"], e.slot, e.slot.worker.role
    argv = [e.python, "-m", "dynamo.sglang", "--model-path", model["path"], "--served-model-name", model["name"]]
    argv += e.planes.flags() + sglang_parallel_flags(role)
    argv += multi_node_flags(e, ports, "sglang")  # node 0 serves, the others follow it
    if e.disagg:
        argv += ["--disaggregation-mode", role.name]
        ports["bootstrap"] = e.alloc.take()
        argv += ["--disaggregation-bootstrap-port", "{port:self.bootstrap}"]
    return argv + e.user_args, not s.leader


def _dynamo_trtllm(e: EngineInput, ports: dict, env: dict) -> tuple[list[str], bool]:
    """dynamo.trtllm (its ``backend_args``): TRT-LLM spans nodes through MPI, not per-node ranks,
    so a worker is one process here; wider workers are rejected by the recipe check."""
    model, role = e.doc["model"], e.slot.worker.role
    argv = [e.python, "-m", "dynamo.trtllm", "--model-path", model["path"], "--served-model-name", model["name"]]
    argv += e.planes.flags() + ["--tensor-parallel-size", str(role.tp)]
    if role.pp > 1:
        argv += ["--pipeline-parallel-size", str(role.pp)]
    if role.ep:
        argv += ["--expert-parallel-size", str(role.tp)]
    if e.kv_router:  # KV events reach the router over the event plane, no port of their own
        argv.append("--publish-kv-events")
    if e.disagg:
        argv += ["--disaggregation-mode", role.name]
    return argv + e.user_args, False


def parallel_flags(tp: int, pp: int, dp: int) -> list[str]:
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
    argv = ["{servesweep_python}", "-m", "servesweep.run.standin", "--ports"]
    argv += [f"{{rank_port:self.{name}}}:{b.width}" for name, b in spec.ports.items()]
    return ProcessSpec(spec.ports, tuple(argv), spec.env, None, None, {}, True)

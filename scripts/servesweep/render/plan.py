"""(recipe, cluster facts, concurrency) -> Plan: a pure, deterministic function.

The plan lists every physical process with its node, GPU slice, ports, env
and argv, plus benchmark settings and Slurm resources. Its canonical JSON is
what the point rule depends on, so it holds only what affects that point.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..contract.plan import PLAN_SCHEMA, Process
from ..fileio.encode import digest, encode
from ..fileio.errors import InputError, Problem
from . import benchmark, dataid, engines, flags, kinds, kvstore, limits, preamble, pythons, sweep, telemetry, topology
from .cluster import Cluster
from .kinds.dynamo_frontend import FRONTEND
from .plantext import POINT_KEYS, LayoutTexts
from .ports import PortAllocator, binding_collisions, usable_slots
from .profiling import arm_points
from .recipe import PLACEHOLDER, RUNTIME_PLACEHOLDERS, Recipe

REHEARSAL_MODEL = "tiny-llama"


def _fill(node, values: dict):
    """Substitute cluster placeholders in every string; leave runtime ones."""
    if isinstance(node, str):

        def sub(m):
            k = m.group(1)
            return values[k] if k in values and k not in RUNTIME_PLACEHOLDERS else m.group(0)

        return PLACEHOLDER.sub(sub, node)
    if isinstance(node, dict):
        return {k: _fill(v, values) for k, v in node.items()}
    if isinstance(node, list):
        return [_fill(v, values) for v in node]
    return node


def _env_value(v):
    if isinstance(v, dict) and "from_stack" in v:  # a stack credential (render/engines.Planes)
        return {"from_stack": v["from_stack"]}
    if isinstance(v, dict):
        return {"from_env": v["from_env"], "secret": bool(v.get("secret", True))}
    if isinstance(v, bool):
        return "1" if v else "0"
    return str(v)


def _merge_env(*layers: dict) -> dict:
    out: dict = {}
    for layer in layers:
        for k, v in (layer or {}).items():
            out[k] = _env_value(v)
    return out


def render(
    recipe: Recipe, cluster: Cluster, conc: int, rehearsal: Cluster | None = None, layout: tuple | None = None
) -> dict:
    """Render one point. With ``rehearsal`` (a local cluster), keep the layout but run mockers.
    A layout the cluster cannot hold is an InputError naming the recipe's field, never a traceback."""
    try:
        return render_point(recipe, cluster, conc, rehearsal, layout)[0]
    except topology.PlacementError as e:
        raise InputError([Problem(recipe.source, f, r) for f, r in e.issues]) from None


def render_point(
    recipe: Recipe, cluster: Cluster, conc: int, rehearsal: Cluster | None = None, layout: tuple | None = None
) -> tuple[dict, str]:
    """The plan and its canonical text (exactly ``canonical(plan)``).

    ``layout`` (from :func:`layout`) lets a sweep build its concurrency-independent part once per
    recipe, JSON included; each point encodes only the values it sets.
    """
    base, doc, texts = layout or globals()["layout"](recipe, cluster, rehearsal)
    run_cluster = rehearsal or cluster
    share = sweep.screen_share(recipe.sweep["halving"]) if recipe.screen else 1.0
    bench = benchmark.settings(doc, conc, cluster, rehearsal, share)
    plan = dict(base)
    plan["point"] = conc  # the target's concurrency (rehearsal may cap the one it runs)
    plan["benchmark"] = bench
    plan["resources"] = dict(base["resources"], **benchmark.time_budget(doc, run_cluster, bench))
    values = {k: encode(plan[k]) for k in POINT_KEYS}
    values["curve_benchmark"] = encode({k: v for k, v in bench.items() if k != "concurrency"})
    plan["fingerprints"] = {
        "plan": digest(texts.body.fill(values)),
        "curve": digest(texts.curve.fill(values)),
        "server": texts.server,
    }
    values["fingerprints"] = encode(plan["fingerprints"])
    return plan, texts.plan.fill(values)


def layout(recipe: Recipe, cluster: Cluster, rehearsal: Cluster | None = None) -> tuple[dict, dict, LayoutTexts]:
    """The concurrency-independent part of a plan, the placeholder-filled recipe, and templates
    of the plan's text with that part already encoded."""
    doc, kind, image, python = _effective_recipe(recipe, cluster, rehearsal)
    run_cluster = rehearsal or cluster
    roles = Recipe(recipe.name, recipe.source, doc).roles()
    slots = topology.place(roles, cluster)
    nodes = max(s.node for s in slots) + 1
    planes = _planes(recipe, doc, cluster, nodes)
    alloc = PortAllocator(cluster.port_base, cluster.port_block)
    tools = _Binaries.of(run_cluster, image)
    dynamo = kinds.get(kind).dynamo
    procs = _control_plane(planes, tools, alloc) if dynamo else []
    store = kvstore.worker_env(doc) if kvstore.needed(recipe.doc) else {}  # the recipe's args: a rehearsal keeps few
    if store:
        procs.append(_process(kvstore.NAME, kvstore.NAME, None, 0, (), kvstore.process(tools.mooncake_master, alloc)))
    frontends = _frontends(doc, kind, python, alloc, planes, nodes, rehearsal is not None) if dynamo else []
    procs += frontends
    cpu = None if rehearsal else cluster.cpu_engine
    engine_procs = _engines(kind, doc, slots, python, alloc, planes, rehearsal is not None, cpu, store)
    procs += engine_procs
    guards = engines.system_guards(engine_procs, python, rehearsal is not None)
    procs += [_process(f"sysguard-n{node}", "sysguard", None, node, (), spec) for node, spec in guards]
    exporters = telemetry.exporters(run_cluster, engine_procs, alloc)  # energy's hook: GPU telemetry per node
    procs += [_process(f"gpu-telemetry-n{node}", telemetry.ROLE, None, node, (), spec) for node, spec in exporters]
    # nginx in front of several frontends, or of several plain-engine replicas (no router of their own)
    entries = frontends if dynamo else [p for p in engine_procs if not p.headless]
    balancer = None
    if len(entries) > 1:
        spec = engines.balancer(tools.nginx, alloc)
        procs.append(_process("balancer", "balancer", None, 0, (), spec))
        balancer = {
            "process": "balancer",
            "upstreams": [f"{{addr:{f.name}}}:{{port:{f.name}.http}}" for f in entries],
            "session_header": doc["scenario"].get("session_header"),
        }
    _check_ports(procs, alloc, cluster, one_host=run_cluster.launcher == "local")
    client = "balancer" if balancer else (frontends or [p for p in procs if p.registers or p.role == "agg"])[0].name
    plan = _plan_doc(recipe, cluster, rehearsal, doc, kind, image, roles, slots, procs)
    if rehearsal is None:
        arm_points(recipe, plan, kind)  # a profile sharing the stack: its engines start with the profiler idle
    limits.check(plan, recipe.doc, recipe.source)
    plan.update(_data(doc, cluster, rehearsal))
    plan.update(
        client_url=f"http://{{addr:{client}}}:{{port:{client}.http}}",
        frontends=[f.name for f in frontends],
        balancer=balancer,
        discovery={
            "backend": planes.discovery,
            "event_plane": planes.event_plane,
            "namespace": "{namespace}",
            "request_plane_tls": planes.tls,
        },  # fmt: skip
    )
    return plan, doc, LayoutTexts.of(plan)


def data_inputs(recipe: Recipe, cluster: Cluster, rehearsal: Cluster | None = None) -> dict:
    """The plan's ``data`` and ``model_data`` without rendering it (the render memo's key holds them)."""
    part = {k: recipe.doc[k] for k in ("scenario", "model", "image") if k in recipe.doc}
    doc = _fill(part, cluster.placeholders)
    if rehearsal is not None:
        doc["model"]["path"] = _rehearsal_model(rehearsal)
    return _data(doc, cluster, rehearsal)


def _data(doc: dict, cluster: Cluster, rehearsal: Cluster | None) -> dict:
    """What data the point reads, by content (render/dataid): the client's dataset, the servers' model."""
    dataset = benchmark.settings(doc, 1, cluster, rehearsal)["dataset"]
    in_container = bool(doc.get("image") and cluster.container_runtime and rehearsal is None)
    return {
        "data": dataid.dataset_identity(dataset),
        "model_data": dataid.model_identity(doc["model"], cluster.container_mounts, in_container),
    }


def _rehearsal_model(rehearsal: Cluster) -> str:
    return f"{rehearsal.placeholders.get('model_dir', '.cache/models')}/{REHEARSAL_MODEL}"


def _effective_recipe(recipe: Recipe, cluster: Cluster, rehearsal: Cluster | None) -> tuple[dict, str, str, str]:
    """(placeholder-filled recipe, engine kind, image, python); rehearsal swaps engines for mockers."""
    doc = _fill(recipe.doc, cluster.placeholders)  # builds new containers: the recipe stays untouched
    kind = doc["engine"]["kind"]
    image = doc.get("image")
    python = pythons.resolve(doc["engine"].get("python"), cluster, kind)
    if rehearsal is not None:
        doc["engine"]["args"] = flags.rehearsal_args(kind, doc["engine"].get("args", []))
        for role in (doc["topology"].get("disaggregated") or {}).values():
            role["args"] = flags.rehearsal_args(kind, role.get("args", []))
        kind, image, python = kinds.get(kind).rehearsal, None, rehearsal.engine_python
        doc["model"]["path"] = _rehearsal_model(rehearsal)
    return doc, kind, image, python


def _planes(recipe: Recipe, doc: dict, cluster: Cluster, nodes: int) -> engines.Planes:
    """The recipe's choice, else the cluster's, else etcd on Slurm or across nodes and files on one host."""
    cp = {**cluster.control_plane, **(doc.get("control_plane") or {})}
    default = "etcd" if cluster.launcher == "slurm" or nodes > 1 else "file"
    discovery = cp.get("discovery") or default
    if discovery == "file" and nodes > 1:  # recipe.cluster_problems reports it with the recipe's file
        raise topology.PlacementError([("control_plane.discovery", "file discovery across nodes")])
    return engines.Planes(discovery, cp.get("event_plane") or "zmq", cp.get("request_plane_tls", True))


@dataclass(frozen=True)
class _Binaries:
    """Control-plane executables: from the recipe's image when it has one, else the cluster's paths."""

    etcd: str
    nats: str
    nginx: str
    mooncake_master: str

    @classmethod
    def of(cls, cluster: Cluster, image: str | None) -> _Binaries:
        names = ("etcd", "nats-server", "nginx", "mooncake_master")
        if image:
            return cls(*names)
        cp = cluster.control_plane
        keys = ("etcd", "nats", "nginx", "mooncake_master")
        return cls(*(cp.get(key, name) for key, name in zip(keys, names, strict=True)))


def _process(name: str, role: str, worker: int | None, node: int, gpus: tuple, spec: engines.ProcessSpec) -> Process:
    return Process(
        name, role, worker, node, gpus, spec.ports, spec.env, spec.argv, spec.health_url, spec.metrics_url,
        spec.registers, spec.headless,
    )  # fmt: skip


def _control_plane(planes: engines.Planes, tools: _Binaries, alloc: PortAllocator) -> list[Process]:
    """etcd (and NATS for a NATS event plane) on node 0, started before everything else."""
    out = []
    if planes.discovery == "etcd":
        out.append(_process("etcd", "etcd", None, 0, (), engines.etcd(tools.etcd, alloc)))
    if planes.event_plane == "nats":
        out.append(_process("nats", "nats", None, 0, (), engines.nats(tools.nats, alloc)))
    return out


def _frontends(doc: dict, kind: str, python: str, alloc, planes, nodes: int, rehearsal: bool) -> list[Process]:
    """``frontend.count`` frontends, spread over the stack's nodes from node 0."""
    fe = doc.get("frontend") or {}
    count = fe.get("count", 1)
    env_layers = (doc.get("env"), fe.get("env"))
    out = []
    for i in range(count):
        spec = FRONTEND.process(doc, python, alloc, planes)
        argv = preamble.wrap(spec.argv, python, doc, kind, engine=False, rehearsal=rehearsal)
        spec = engines.ProcessSpec(**{**spec.__dict__, "env": _merge_env(*env_layers, spec.env), "argv": argv})
        out.append(_process("frontend" if count == 1 else f"frontend-{i}", "frontend", None, i % nodes, (), spec))
    return out


def _engines(kind, doc, slots, python, alloc, planes, rehearsal: bool, cpu: dict | None, store: dict) -> list[Process]:
    router = ((doc.get("frontend") or {}).get("router") or {}).get("mode", "kv")
    engine = kinds.get(kind)
    shared: dict[topology.Worker, engines.WorkerPorts] = {}
    out = []
    for slot in slots:
        w = slot.worker
        if w not in shared:
            kv, nixl, rpc = engine.shared_ports(router == "kv", w.role.name != "agg", slot.parts > 1)
            shared[w] = engines.WorkerPorts.take(alloc, w.role.dp, kv, nixl, rpc, slot.name)
        e = engines.EngineInput(kind, doc, slot, python, alloc, router == "kv", planes, shared[w], cpu)
        spec = engine.process(e)
        if rehearsal and spec.headless:
            spec = engines.standin_process(spec)
        env = _merge_env(doc.get("env"), doc["engine"].get("env"), w.role.env, store, spec.env)
        argv = spec.argv
        if argv[0] == python:
            argv = preamble.wrap(argv, python, doc, kind, engine=True, rehearsal=rehearsal)
        spec = engines.ProcessSpec(**{**spec.__dict__, "env": env, "argv": argv})
        out.append(_process(slot.name, w.role.name, w.index, slot.node, slot.gpus, spec))
    return out


def _check_ports(procs: list[Process], alloc: PortAllocator, cluster: Cluster, one_host: bool) -> None:
    issues = [("topology", f"port collision: {c}") for c in binding_collisions(procs, one_host)]
    if alloc.used > cluster.port_block:
        issues.append(
            ("topology", f"needs {alloc.used} ports, more than the cluster's port_block {cluster.port_block}")
        )
    if issues:
        raise topology.PlacementError(issues)


def _plan_doc(recipe, cluster, rehearsal, doc, kind, image, roles, slots, procs) -> dict:
    """The plan's concurrency-independent fields (client, frontends and discovery are added by layout)."""
    run_cluster = rehearsal or cluster
    per_node: dict[int, int] = {}
    for s in slots:
        per_node[s.node] = per_node.get(s.node, 0) + len(s.gpus)
    nodes = max(s.node for s in slots) + 1
    expect: dict[str, int] = {}
    for p in procs:
        for comp, n in p.registers.items():
            expect[comp] = expect.get(comp, 0) + n
    container = None
    if image and cluster.container_runtime and rehearsal is None:
        # each pyxis step is its own container: the workflow dir (run dirs, logs, discovery, caches) must be mounted
        container = {"runtime": cluster.container_runtime, "image": image}
        container["mounts"] = [*cluster.container_mounts, "{workdir}:{workdir}"]
        if cluster.container_runtime == "bwrap":
            container["base"] = list(cluster.container_base)
    return {
        "schema": PLAN_SCHEMA,
        "recipe": recipe.name,
        "recipe_file": recipe.source,
        "cluster": cluster.name,
        "run_cluster": run_cluster.name,
        "launcher": run_cluster.launcher,
        "rehearsal": rehearsal is not None,
        "image": image,
        "engine": kind,
        "recipe_engine": recipe.engine_kind,
        "server_metrics": kinds.get(kind).server_metrics(),
        "model": doc["model"],
        "dynamo": doc.get("dynamo"),
        "setup": doc.get("setup"),
        "topology": _topology_summary(recipe, roles, sum(per_node.values()), nodes, len(procs)),
        "processes": [p.to_json() for p in procs],
        "expect_registrations": expect,
        "readiness": {"timeout_s": (doc.get("readiness") or {}).get("timeout_s", run_cluster.readiness_timeout_s)},
        "validity": {
            "max_error_rate": (doc.get("validity") or {}).get("max_error_rate", 0.05),
            "max_cancelled_share": (doc.get("validity") or {}).get("max_cancelled_share", 0.1),
            "expect_log": doc.get("expect_log") or {},
        },
        "container": container,
        "stack": _stack(doc, kind),
        "ports": {
            "base": cluster.port_base,
            "block": cluster.port_block,
            "slots": usable_slots(cluster.port_base, cluster.port_block, run_cluster.port_slots),
        },
        "resources": {
            "nodes": nodes,
            "gpus_per_node": max(per_node.values()),
            "exclusive": nodes > 1 or (cluster.launcher == "slurm" and max(per_node.values()) == cluster.gpus_per_node),
            "cpus_per_task": run_cluster.cpus_per_job,
            "mem_mb": run_cluster.mem_mb_per_node,
        },
    }


def _stack(doc: dict, kind: str) -> dict:
    """Warm-stack settings: reuse, and the kind's prefix-cache reset (enabled only on opt-in)."""
    stack, reset = doc.get("stack") or {}, kinds.get(kind).prefix_reset
    out = {"reuse": stack.get("reuse", True), "prefix_reset": None}
    if reset:
        enabled = bool(stack.get("reset_prefix_cache"))
        out["prefix_reset"] = {"path": reset.path, "port": reset.port, "enabled": enabled, "opt_in": reset.opt_in}
    return out


def _topology_summary(recipe: Recipe, roles, gpus: int, nodes: int, processes: int) -> dict:
    out = {"kind": "disaggregated" if recipe.disaggregated else "aggregated"}
    for r in roles:
        out["replicas" if r.name == "agg" else r.name] = r.workers
        out[f"{r.name}_worker"] = {"tp": r.tp, "dp": r.dp, "pp": r.pp, "ep": r.ep, "launch": r.launch}
    out.update({"gpus": gpus, "nodes": nodes, "processes": processes})
    return out

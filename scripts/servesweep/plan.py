"""(recipe, cluster facts, concurrency) -> Plan: a pure, deterministic function.

The plan lists every physical process with its node, GPU slice, ports, env
and argv, plus benchmark settings and Slurm resources. Its canonical JSON is
what the point rule depends on, so it holds only what affects that point.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from dataclasses import dataclass

from . import engines, topology
from .cluster import Cluster
from .ports import usable_slots
from .recipe import PLACEHOLDER, RUNTIME_PLACEHOLDERS, Recipe

PLAN_SCHEMA = "servesweep.plan/1"
REHEARSAL_MODEL = "tiny-llama"
REHEARSAL_DATASET = {"synthetic": {"isl": 256, "osl": 32, "entries": 500}}


@dataclass(frozen=True)
class Process:
    """A physical process of the stack. Rendering is the only thing that creates these."""

    name: str
    role: str  # frontend | agg | prefill | decode
    worker: int | None
    node: int
    gpus: tuple[int, ...]
    ports: tuple[engines.Port, ...]
    env: dict
    argv: tuple[str, ...]
    health_url: str | None
    registers: dict
    headless: bool = False

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "role": self.role,
            "worker": self.worker,
            "node": self.node,
            "gpus": list(self.gpus),
            "ports": {p.name: {"port": p.number, "count": p.count} for p in self.ports},
            "env": self.env,
            "argv": list(self.argv),
            "health_url": self.health_url,
            "registers": self.registers,
            "headless": self.headless,
        }


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


def _benchmark(doc: dict, conc: int, cluster: Cluster, rehearsal: Cluster | None) -> dict:
    scen = doc["scenario"]
    dataset = scen["dataset"]
    duration = scen.get("duration_s")
    requests = scen.get("requests")
    warmup = dict(scen.get("warmup") or {})
    tools = rehearsal or cluster
    if rehearsal is not None:
        dataset = REHEARSAL_DATASET
        conc = min(conc, rehearsal.rehearsal_max_concurrency)
        cap = rehearsal.rehearsal_max_duration_s
        duration, requests = (min(duration, cap), None) if duration else (None, min(requests, conc * 4))
        warmup = {"requests": min(warmup.get("requests", 0), conc)} if warmup else {}
    (kind, ds), *_ = dataset.items()
    return {
        "endpoint": scen.get("endpoint", "chat"),
        "streaming": True,
        "concurrency": conc,
        "duration_s": duration,
        "request_count": requests,
        "warmup": warmup,
        "dataset": {"kind": kind, **ds},
        "session_header": scen.get("session_header"),
        "scenario": scen["name"],
        "aiperf": tools.aiperf,
        "tokenizer": tools.tokenizer,
        "hf_home": tools.hf_home,
    }


def _runtime_minutes(doc: dict, cluster: Cluster, bench: dict) -> int:
    readiness = (doc.get("readiness") or {}).get("timeout_s", cluster.readiness_timeout_s)
    run = bench["duration_s"] or 600
    warm = bench["warmup"].get("duration_s", 0) + (60 if bench["warmup"].get("requests") else 0)
    return math.ceil((readiness + warm + run + cluster.runtime_margin_s) / 60)


def render(
    recipe: Recipe, cluster: Cluster, conc: int, rehearsal: Cluster | None = None, layout: tuple | None = None
) -> dict:
    """Render one point. With ``rehearsal`` (a local cluster), keep the layout but run mockers."""
    return render_point(recipe, cluster, conc, rehearsal, layout)[0]


def render_point(
    recipe: Recipe, cluster: Cluster, conc: int, rehearsal: Cluster | None = None, layout: tuple | None = None
) -> tuple[dict, str]:
    """The plan and its canonical text (exactly ``canonical(plan)``).

    ``layout`` (from :func:`layout`) lets a sweep build its concurrency-independent part once per
    recipe, JSON included; each point encodes only the values it sets.
    """
    base, doc, texts = layout or globals()["layout"](recipe, cluster, rehearsal)
    run_cluster = rehearsal or cluster
    bench = _benchmark(doc, conc, cluster, rehearsal)
    plan = dict(base)
    plan["concurrency"] = bench["concurrency"]
    plan["point"] = conc  # the target's concurrency (rehearsal may cap the one it runs)
    plan["benchmark"] = bench
    plan["resources"] = dict(base["resources"], runtime_min=_runtime_minutes(doc, run_cluster, bench))
    values = {k: _encode(plan[k]) for k in POINT_KEYS}
    values["curve_benchmark"] = _encode({k: v for k, v in bench.items() if k != "concurrency"})
    plan["fingerprints"] = {
        "plan": _digest_text(texts.body.fill(values)),
        "curve": _digest_text(texts.curve.fill(values)),
    }
    values["fingerprints"] = _encode(plan["fingerprints"])
    return plan, texts.plan.fill(values)


def layout(recipe: Recipe, cluster: Cluster, rehearsal: Cluster | None = None) -> tuple[dict, dict, _LayoutTexts]:
    """The concurrency-independent part of a plan, the placeholder-filled recipe, and templates
    of the plan's text with that part already encoded."""
    doc = _fill(recipe.doc, cluster.placeholders)  # builds new containers: the recipe stays untouched
    kind = doc["engine"]["kind"]
    image = doc.get("image")
    python = doc["engine"].get("python") or cluster.engine_python
    if rehearsal is not None:
        kind, image, python = "dynamo.mocker", None, rehearsal.engine_python
        doc["model"]["path"] = f"{rehearsal.placeholders.get('model_dir', '.cache/models')}/{REHEARSAL_MODEL}"
        doc["engine"]["args"] = []
        for role in (doc["topology"].get("disaggregated") or {}).values():
            role.pop("args", None)
    roles = {r.name: r for r in Recipe(recipe.name, recipe.source, doc).roles()}
    slots = topology.place(list(roles.values()), cluster)
    alloc = engines.PortAllocator(cluster.port_base, cluster.port_block)
    router = ((doc.get("frontend") or {}).get("router") or {}).get("mode", "kv")
    processes: list[Process] = []
    top_env = doc.get("env", {})
    has_frontend = kind != "vllm"
    if has_frontend:
        spec = engines.frontend(doc, python, alloc)
        env = _merge_env(top_env, (doc.get("frontend") or {}).get("env"), spec.env)
        processes.append(Process("frontend", "frontend", None, 0, (), spec.ports, env, spec.argv, spec.health_url, {}))
    leaders = {}
    for slot in slots:
        if slot.leader and slot.part == 0:
            leaders[(slot.worker.role, slot.worker.index)] = slot.name
        run_slot = slot
        if rehearsal is not None and slot.parts > 1 and slot.worker.launch == "per_node":
            run_slot = dataclasses.replace(slot, dp_local=slot.worker.dp if slot.leader else slot.dp_local)
        role = roles[slot.worker.role]
        spec = engines.engine_process(
            kind,
            doc,
            run_slot,
            role.args,
            python,
            alloc,
            router == "kv",
            leaders[(slot.worker.role, slot.worker.index)],
        )
        if rehearsal is not None and spec.headless:
            spec = engines.standin_process(spec)
        env = _merge_env(top_env, doc["engine"].get("env"), role.env, spec.env)
        processes.append(
            Process(
                slot.name,
                slot.worker.role,
                slot.worker.index,
                slot.node,
                slot.gpus,
                spec.ports,
                env,
                spec.argv,
                spec.health_url,
                spec.registers,
                spec.headless,
            )
        )
    if alloc.used > cluster.port_block:
        raise topology.PlacementError(
            [("topology", f"needs {alloc.used} ports, more than the cluster's port_block {cluster.port_block}")]
        )
    expect: dict[str, int] = {}
    for p in processes:
        for comp, n in p.registers.items():
            expect[comp] = expect.get(comp, 0) + n
    nodes = max(s.node for s in slots) + 1
    per_node: dict[int, int] = {}
    for s in slots:
        per_node[s.node] = per_node.get(s.node, 0) + len(s.gpus)
    gpus_total = sum(per_node.values())
    client = processes[0].name  # the frontend, or the single plain-vllm replica
    run_cluster = rehearsal or cluster
    topo_summary = {"kind": "disaggregated" if recipe.disaggregated else "aggregated"}
    for r in roles.values():
        key = "replicas" if r.name == "agg" else r.name
        topo_summary[key] = r.workers
        topo_summary[f"{r.name}_worker"] = {"tp": r.tp, "dp": r.dp, "pp": r.pp, "ep": r.ep, "launch": r.launch}
    topo_summary.update({"gpus": gpus_total, "nodes": nodes, "processes": len(processes)})
    plan = {
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
        "model": doc["model"],
        "dynamo": doc.get("dynamo"),
        "setup": doc.get("setup"),
        "topology": topo_summary,
        "nodes": nodes,
        "gpus_total": gpus_total,
        "processes": [p.to_json() for p in processes],
        "client_url": f"http://{{addr:{client}}}:{{port:{client}.http}}",
        "frontend": "frontend" if has_frontend else None,
        "expect_registrations": expect,
        "readiness": {
            "timeout_s": (doc.get("readiness") or {}).get("timeout_s", run_cluster.readiness_timeout_s),
        },
        "validity": {"max_error_rate": (doc.get("validity") or {}).get("max_error_rate", 0.05)},
        "slo": doc.get("slo") or {},
        "container": (
            {"runtime": cluster.container_runtime, "image": image, "mounts": list(cluster.container_mounts)}
            if image and cluster.container_runtime and rehearsal is None
            else None
        ),
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
    return plan, doc, _LayoutTexts.of(plan)


# Sorted, compact JSON by json's C encoder (indent would force the slow Python one); one encoder
# object, since json.dumps with options builds a new one per call.
_encode = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode


_encode_key = json.encoder.encode_basestring  # what json.dumps uses for keys with ensure_ascii=False


def canonical(obj) -> str:
    return _encode(obj) + "\n"


def pretty(obj) -> str:
    return json.dumps(obj, sort_keys=True, indent=1, ensure_ascii=False) + "\n"


POINT_KEYS = ("benchmark", "concurrency", "point", "resources")  # what a point sets on its layout


@dataclass(frozen=True)
class _Template:
    """A dict's canonical text with holes for some values: static text and hole names alternate."""

    pieces: tuple[str, ...]

    @classmethod
    def of(cls, fixed: dict[str, str], holes: dict[str, str]) -> _Template:
        """``fixed``: key -> encoded value; ``holes``: key -> name of the value that fills it."""
        pieces, text = [], "{"
        for i, key in enumerate(sorted([*fixed, *holes])):
            text += ("," if i else "") + _encode_key(key) + ":"
            if key in holes:
                pieces += [text, holes[key]]
                text = ""
            else:
                text += fixed[key]
        return cls((*pieces, text + "}\n"))

    def fill(self, values: dict[str, str]) -> str:
        p = self.pieces
        return "".join([p[i] if i % 2 == 0 else values[p[i]] for i in range(len(p))])


@dataclass(frozen=True)
class _LayoutTexts:
    """Templates of a layout's plan text, its fingerprinted body and its curve (no concurrency)."""

    plan: _Template
    body: _Template
    curve: _Template

    @classmethod
    def of(cls, base: dict) -> _LayoutTexts:
        fixed = {k: _encode(v) for k, v in base.items() if k not in POINT_KEYS}
        body = {k: k for k in POINT_KEYS}
        curve = {"benchmark": "curve_benchmark", "resources": "resources"}
        return cls(
            _Template.of(fixed, {**body, "fingerprints": "fingerprints"}),
            _Template.of(fixed, body),
            _Template.of(fixed, curve),
        )


def _digest_text(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]

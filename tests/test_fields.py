"""No field does nothing: every leaf of the recipe and cluster schemas, changed, changes a rendered
plan (the run's contract), or is listed below as descriptive, with the reason."""

from __future__ import annotations

import copy
import re

import pytest
import yaml

from servesweep.fileio.errors import InputError
from servesweep.render import kinds, profiling
from servesweep.render.cluster import Cluster, _from_doc
from servesweep.render.plan import render
from servesweep.render.recipe import Recipe

from helpers import CLUSTERS, ROOT

# Leaves that never reach a plan, and why they still do something (docs/tests.md lists them too).
DESCRIPTIVE = {
    "name": "the recipe's identity: results/<name>/, plan and result names",
    "description": "shown in the summary; words only",
    "clusters": "which clusters a recipe may run on: selects plans, is not one",
    "concurrency": "which points exist (targets), each plan holds its own",
    "capacity.": "the capacity search: which probes exist and when it stops (report/capacity)",
    "stack.linger_s": "how long a stack stays up after a run's last point (the curve file): not what it measures",
    "evals.": "the recipe's accuracy benchmarks: eval targets on its stack with settings of their own (run/evals)",
    "slo.": "the summary's verdicts and the capacity search's pass/fail: results are kept, SLOs re-judged",
    "sweep.": "the variants a recipe expands into (each its own recipe and plans: tests/test_sweeps.py)",
    "cluster:name": "the cluster's identity (profile/--config cluster=)",
    "cluster:description": "words only",
    "cluster:gpu_type": "recorded with the cluster facts in each result's source",
    "cluster:nodes": "a limit: a recipe that needs more nodes is refused, a plan never holds it",
    "topology.aggregated.gpus": "a check: must equal dp x tp x pp (the recipe is refused otherwise)",
    "topology.disaggregated.prefill.gpus": "a check: must equal dp x tp x pp (the recipe is refused otherwise)",
    "topology.disaggregated.decode.gpus": "a check: must equal dp x tp x pp (the recipe is refused otherwise)",
}
# Other fields a leaf only matters with, set before and after the change.
PREPARE = {
    "cluster:container.base": {("container", "runtime"): "bwrap"},
    "cluster:control_plane.nats": {("control_plane", "event_plane"): "nats", ("control_plane", "discovery"): "etcd"},
    "cluster:control_plane.etcd": {("control_plane", "discovery"): "etcd"},
    "cluster:telemetry.port": {("telemetry", "source"): "dcgm"},  # a site DCGM exporter's (render/telemetry)
    "cluster:telemetry.interval_s": {("telemetry", "source"): "dcgm", ("telemetry", "port"): 9400},
    "cluster:telemetry.command": {("telemetry", "source"): "exporter", ("telemetry", "command"): ["x", "{port}"]},
}
RECIPES = sorted((ROOT / "recipes").glob("*.yaml"))


def leaves(schema: dict, node: dict, path: tuple = ()) -> list[tuple[tuple, dict]]:
    if "$ref" in node:
        node = schema["$defs"][node["$ref"].split("/")[-1]]
    for key in ("oneOf", "anyOf"):
        objs = [o for o in node.get(key, []) if isinstance(o, dict) and "properties" in o]
        if objs:
            return [leaf for o in objs for leaf in leaves(schema, o, path)]
    out = [leaf for k, v in (node.get("properties") or {}).items() for leaf in leaves(schema, v, (*path, k))]
    extra = node.get("additionalProperties")
    if isinstance(extra, dict) and (node.get("properties") or node.get("type") == "object"):
        out += leaves(schema, extra, (*path, "*"))
    return out or [(path, node)]


ABSENT = object()  # a one-value enum changes from its value to not being set


def _values(node: dict, old, leaf: str = ""):
    """Other values the schema allows, the likeliest to be accepted first."""
    if leaf == "path" and not old:  # a model or trace: under the cluster's data roots (render/cluster)
        return ["{trace_dir}/probe-1", "{trace_dir}/probe-2"]
    if "enum" in node:
        return [v for v in node["enum"] if v != old] or [ABSENT]
    if "enum" in (node.get("items") or {}):  # a list of names: each one alone
        return [[v] for v in node["items"]["enum"] if [v] != old]
    kinds = node.get("type")
    kinds = kinds if isinstance(kinds, list) else [kinds]
    if isinstance(old, str):
        kinds = ["string"]
    if isinstance(old, bool) or "boolean" in kinds:
        return [True, False] if old is None else [not old]
    if isinstance(old, int) or (old is None and "integer" in kinds):
        old = old or 0
        return [old + 1, old * 2, max(old - 1, node.get("minimum", 0))]
    if isinstance(old, float) or (old is None and "number" in kinds):
        return [old * 1.5 + 0.5, old / 2] if old else [0.5, 0.25]
    if isinstance(old, list) or (old is None and "array" in kinds):
        return [[*(old or []), "--servesweep-probe"], [*(old or []), "/probe:/probe"]]
    shaped = ["a" * 40, "b" * 40, "1.2.3", "1.2.4", "PROBE_A", "PROBE_B", "1GB", "2GB"]  # hex, version, name, size
    candidates = [f"{old}1", f"{old}-x", f"{old}/x", f"x-{old}"] if old else ["v1", "v-x", "/v/x", *shaped]
    pattern = node.get("pattern")
    return [c for c in candidates if not pattern or re.search(pattern, c)]


def _get(doc, path):
    for k in path:
        if not isinstance(doc, dict) or not doc:
            return None
        doc = doc.get(next(iter(doc)) if k == "*" else k)
    return doc


def _set(doc, path, value):
    if path[:2] == ("scenario", "dataset") and len(path) > 3 and path[2] not in doc["scenario"]["dataset"]:
        doc["scenario"]["dataset"] = {path[2]: {}}  # one dataset kind at a time
    if len(path) > 1 and path[-2] == "*" and path[-1] in ("from_env", "secret"):
        env = _get(doc, path[:-2])
        if not env or not isinstance(env[next(iter(env))], dict):  # an env value by reference, whole
            _set(doc, path[:-1], {"from_env": "SERVESWEEP_PROBE", "secret": True})
    for k in path[:-1]:
        doc = doc.setdefault(next(iter(doc), "SERVESWEEP_PROBE") if k == "*" else k, {})
    key = next(iter(doc), "SERVESWEEP_PROBE") if path[-1] == "*" else path[-1]
    if value is ABSENT:
        doc.pop(key, None)
    else:
        doc[key] = value


def _plans(recipe_doc: dict, cluster: Cluster | None, local: Cluster) -> list[dict]:
    """The recipe's plan on ``cluster`` (if it may run there) and its rehearsal on ``local``."""
    if "profile" in recipe_doc:  # a leaf alone: the section needs its kind (a shared one arms every plan)
        recipe_doc = {**recipe_doc, "profile": {"kind": "torch", **recipe_doc["profile"]}}
    r = Recipe(recipe_doc["name"], "probe", recipe_doc)
    conc = recipe_doc["concurrency"][0]
    home = CLUSTERS[recipe_doc["clusters"][0]]
    on = [render(r, cluster, conc)] if cluster and cluster.name in recipe_doc["clusters"] else []
    return [*on, render(r, home, conc, local), *_profile(r, home)]


def _profile(r: Recipe, cluster: Cluster) -> list[dict]:
    """A profile section's plan and settings (render/profiling): what its leaves change."""
    if "profile" not in r.doc:
        return []
    if profiling.problems(r) or profiling.cluster_problems(r, cluster):
        raise ValueError("the profile section is refused")
    return list(profiling.profile_files(r, render(r, cluster, profiling.concurrency(r))))


def _pairs():
    """Every recipe with each cluster it may run on, and every cluster as its rehearsal host."""
    docs = [yaml.safe_load(f.read_text()) for f in RECIPES]
    return docs, list(CLUSTERS.values())


def _prepared(doc: dict, key: str) -> dict:
    doc = copy.deepcopy(doc)
    for path, value in PREPARE.get(key, {}).items():
        _set(doc, path, value)
    return doc


def _recipe_leaf(path: tuple, node: dict) -> list[str]:
    docs, _ = _pairs()
    held = [d for d in docs if _get(d, path) is not None]
    parents = [d for d in docs if isinstance(_get(d, path[:-1]), dict)] if len(path) > 1 else []
    tried = []
    for doc in held or parents or docs:
        cluster = CLUSTERS[doc["clusters"][0]]
        doc, values = _holding(doc, path, node)
        before = _quiet(_plans, doc, cluster, CLUSTERS["local"])
        for value in values:
            changed = copy.deepcopy(doc)
            _set(changed, path, value)
            after = _quiet(_plans, changed, cluster, CLUSTERS["local"])
            if before is not None and after is not None and after != before:
                return []
            tried.append(f"{value!r}: {'refused' if after is None else 'same plans'} ({doc['name']})")
    return tried or ["no recipe renders"]


def _cluster_leaf(path: tuple, node: dict, key: str) -> list[str]:
    docs, clusters = _pairs()
    tried = []
    for cluster in clusters:
        base, values = _holding(_prepared(cluster.doc, key), path, node)
        local = lambda c: c if c.launcher == "local" else CLUSTERS["local"]  # noqa: E731
        for value in values:
            changed = copy.deepcopy(base)
            _set(changed, path, value)
            old, new = _from_doc(base, "probe"), _from_doc(changed, "probe")
            for doc in docs:
                before = _quiet(_plans, doc, old, local(old))
                after = _quiet(_plans, doc, new, local(new))
                if before is not None and after is not None and after != before:
                    return []
            tried.append(f"{value!r} on {cluster.name}")
    return tried


def _holding(doc: dict, path: tuple, node: dict) -> tuple[dict, list]:
    """``doc`` with the leaf set (its first other value when it has none: a change is always from one
    value of the leaf to another, never from absent to present) and the values to change it to."""
    if _get(doc, path) is not None:
        return doc, _values(node, _get(doc, path))
    first, *rest = _values(node, None, path[-1])
    doc = copy.deepcopy(doc)
    _set(doc, path, first)
    return doc, rest


def _quiet(fn, *args):
    try:
        return fn(*args)
    except (InputError, KeyError, ValueError, TypeError, IndexError):
        return None


def _schema(name: str) -> list[tuple[tuple, dict]]:
    schema = yaml.safe_load((ROOT / "schemas" / name).read_text())
    # the engine kinds are the registry's (the schema takes any name; the loader checks it)
    return [(p, {"enum": kinds.names()} if p == ("engine", "kind") else n) for p, n in leaves(schema, schema)]


CASES = [(p, n, False) for p, n in _schema("recipe.schema.yaml")] + [
    (p, n, True) for p, n in _schema("cluster.schema.yaml")
]


def _listed(path: tuple, cluster_leaf: bool) -> bool:
    name = ("cluster:" if cluster_leaf else "") + ".".join(path)
    return any(name == k or (k.endswith(".") and name.startswith(k)) for k in DESCRIPTIVE)


def _key(path: tuple, cluster_leaf: bool) -> str:
    return ("cluster:" if cluster_leaf else "") + ".".join(path)


CHECKED = [c for c in CASES if not _listed(c[0], c[2])]


def test_every_descriptive_entry_names_schema_leaves():
    """The list is not a blanket: each entry names at least one leaf, and most leaves are checked."""
    names = [_key(p, c) for p, _, c in CASES]
    for k in DESCRIPTIVE:
        assert any(n == k or (k.endswith(".") and n.startswith(k)) for n in names), f"{k} names no schema leaf"
    # a sweep's own settings choose which recipes there are, never a plan's content (their effects:
    # tests/test_sweeps.py, tests/test_search.py): counted apart from the leaves that describe a plan
    described = [c for c in CASES if c not in CHECKED and not _key(c[0], c[2]).startswith("sweep.")]
    assert len(CHECKED) >= 3 * len(described), (len(CHECKED), len(described))


@pytest.mark.parametrize("path,node,cluster_leaf", CHECKED, ids=[_key(p, c) for p, _, c in CHECKED])
def test_every_field_changes_a_plan_or_is_listed_as_descriptive(path, node, cluster_leaf):
    key = _key(path, cluster_leaf)
    tried = _cluster_leaf(path, node, key) if cluster_leaf else _recipe_leaf(path, node)
    assert not tried, f"{key}: no change of it changed a plan: " + "; ".join(tried[:6])

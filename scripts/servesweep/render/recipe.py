"""Recipes: loading, JSON Schema for shape, code for meaning.

Every problem names the file, the field path and the reason; all problems of
a run are collected and reported together.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from ..capacity.search import capacity_problems
from ..checks.evalsets import recipe_problems
from ..contract import names, paths
from ..contract.plan import RUNTIME_REF, SECRET_NAME, USER_REF_NAMES
from ..fileio.errors import Problem
from . import env_readers, flags, kinds, kvstore, launcher_env, limits, preamble, pythons, scenarios, topology
from .cluster import Cluster
from .profiling import cluster_problems as profile_cluster_problems
from .profiling import problems as profile_problems
from .topology import Role

# {name} placeholders; JSON objects ({"k": ...}) never match.
PLACEHOLDER = re.compile(r"\{([a-z_][a-z0-9_]*)\}")
RUNTIME_PLACEHOLDERS = frozenset(USER_REF_NAMES)


@dataclass(frozen=True)
class Recipe:
    name: str
    source: str  # file label used in messages
    doc: dict = field(hash=False, compare=False)
    sweep_of: str | None = None  # a sweep's variant: the recipe it varies (render/sweep)
    choice: tuple[tuple[str, str], ...] = ()  # a variant's (axis, label) pairs
    sweep: dict | None = field(default=None, hash=False, compare=False)  # its sweep (sweep.summary)
    screen: bool = False  # a halving sweep's short first-round run of the variant

    @property
    def variant(self) -> str | None:
        """'mnbt-4096_pls-4' of 'tune.mnbt-4096_pls-4'; None for a recipe that is no variant."""
        return self.name.removeprefix(f"{self.sweep_of}.").removesuffix(f".{paths.SCREEN}") if self.sweep_of else None

    @property
    def variant_name(self) -> str:
        """The variant recipe a screen measures ('tune.mnbt-4096' of 'tune.mnbt-4096.screen'); else its own."""
        return self.name.removesuffix(f".{paths.SCREEN}") if self.screen else self.name

    @property
    def engine_kind(self) -> str:
        return self.doc["engine"]["kind"]

    @property
    def disaggregated(self) -> bool:
        return "disaggregated" in self.doc["topology"]

    @property
    def clusters(self) -> list[str]:
        return list(self.doc["clusters"])

    @property
    def concurrency(self) -> list[int]:
        return list(self.doc["concurrency"])

    @property
    def evals(self) -> dict[str, dict]:  # benchmark -> tasks, n_shots, concurrency
        return dict(self.doc.get("evals") or {})

    def has_point(self, conc: int) -> bool:
        """A point of the sweep, or a probe its capacity search may run."""
        cap = self.doc.get("capacity")
        return conc in self.doc["concurrency"] or (cap is not None and cap["min"] <= conc <= cap["max"])

    def roles(self) -> list[Role]:
        topo = self.doc["topology"]
        if "aggregated" in topo:
            a = topo["aggregated"]
            return [
                Role(
                    "agg",
                    "topology.aggregated",
                    a["replicas"],
                    a.get("tp", 1),
                    a.get("dp", 1),
                    a.get("pp", 1),
                    a.get("ep", False),
                    a.get("launch", "per_worker"),
                )
            ]
        d = topo["disaggregated"]
        return [
            Role(
                r,
                f"topology.disaggregated.{r}",
                d[r]["workers"],
                d[r].get("tp", 1),
                d[r].get("dp", 1),
                d[r].get("pp", 1),
                d[r].get("ep", False),
                d[r].get("launch", "per_worker"),
                tuple(d[r].get("args", ())),
                dict(d[r].get("env", {})),
            )
            for r in ("prefill", "decode")
        ]


def _strings(node, path):
    """Yield (field path, string) for every string value in a document."""
    if isinstance(node, str):
        yield path, node
    elif isinstance(node, dict):
        for k, v in node.items():
            yield from _strings(v, f"{path}.{k}" if path else str(k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _strings(v, f"{path}[{i}]")


def placeholders_in(doc: dict) -> dict[str, list[str]]:
    """Placeholder name -> fields using it."""
    found: dict[str, list[str]] = {}
    for path, s in _strings(doc, ""):
        for m in PLACEHOLDER.finditer(s):
            found.setdefault(m.group(1), []).append(path)
    return found


def _json_problems(args: list, field_prefix: str, label: str) -> list[Problem]:
    problems = []
    for flag, value, idx in flags.iter_flags(args):
        if value is None:
            continue
        if flag in flags.JSON_FLAGS or (isinstance(value, str) and value.lstrip()[:1] in "{["):
            if not isinstance(value, str) or not value.strip():
                continue
            try:
                json.loads(value)
            except json.JSONDecodeError as e:
                problems.append(
                    Problem(
                        label,
                        f"{field_prefix}[{idx if '=' in str(args[idx]) else idx + 1}]",
                        f"{flag} is not valid JSON: {e.msg} at column {e.colno}",
                    )
                )
    return problems


def _arg_shape_problems(args: list, field_prefix: str, label: str) -> list[Problem]:
    problems = []
    for i, a in enumerate(args):
        if isinstance(a, str) and a.startswith("-") and re.search(r"\s", a.split("=", 1)[0]):
            problems.append(
                Problem(
                    label,
                    f"{field_prefix}[{i}]",
                    f"{a!r} holds a flag and a value in one item; args are an argv list "
                    "(never a shell string): write the flag and its value as two items",
                )
            )
    return problems


def semantic_problems(recipe: Recipe, stem: str | None) -> list[Problem]:
    """Meaning checks that need no cluster."""
    return [
        *_sweep_problems(recipe, stem),
        *_engine_problems(recipe),
        *_arg_problems(recipe),
        *_env_problems(recipe),
    ]


def _sweep_problems(recipe: Recipe, stem: str | None) -> list[Problem]:
    doc, label, out = recipe.doc, recipe.source, []
    if stem is not None and stem != recipe.name:
        out.append(Problem(label, "name", f"name {recipe.name!r} must match the file name {stem!r}"))
    if clash := names.reserved_match(recipe.name):  # built from contract/paths
        out.append(Problem(label, "name", f"{recipe.name!r} is a name the workflow uses for its own outputs ({clash})"))
    conc = doc["concurrency"]
    dups = sorted({c for c in conc if conc.count(c) > 1})
    if dups:
        out.append(Problem(label, "concurrency", f"duplicate concurrency values: {dups}"))
    scen = doc["scenario"]
    if "duration_s" in scen and "requests" in scen:
        out.append(Problem(label, "scenario", "give duration_s or requests, not both"))
    if "duration_s" not in scen and "requests" not in scen:
        out.append(Problem(label, "scenario.duration_s", "give duration_s or requests"))
    out += [Problem(label, f, reason) for f, reason in scenarios.problems(scen)]
    out += [Problem(label, f, reason) for f, reason in recipe_problems(recipe.evals)]
    return out + capacity_problems(recipe.doc, recipe.source)


def _engine_problems(recipe: Recipe) -> list[Problem]:
    """What the engine kind supports, and the GPU arithmetic of each role."""
    doc, label = recipe.doc, recipe.source
    kind = kinds.get(recipe.engine_kind)
    out = [Problem(label, f, reason) for f, reason in kind.problems(recipe)]
    if (doc.get("stack") or {}).get("reset_prefix_cache") and not kind.prefix_reset:
        reason = f"{kind.name} offers no prefix-cache reset, so this does nothing"
        out.append(Problem(label, "stack.reset_prefix_cache", reason))
    stack = doc.get("stack") or {}
    if stack.get("linger_s") and stack.get("reuse") is False:
        out.append(Problem(label, "stack.linger_s", "with stack.reuse false no stack outlives its point"))
    out += preamble.pin_problems(doc, label) + kvstore.problems(doc, label) + profile_problems(recipe)
    topo = doc["topology"]
    for r in recipe.roles():
        stated = (topo.get("aggregated") or (topo.get("disaggregated") or {}).get(r.name) or {}).get("gpus")
        if stated is not None and stated != r.gpus_per_worker:
            reason = f"gpus {stated} does not equal dp {r.dp} x tp {r.tp} x pp {r.pp} = {r.gpus_per_worker}"
            out.append(Problem(label, f"{r.field}.gpus", reason))
        if r.launch == "per_gpu" and (r.tp > 1 or r.pp > 1):
            out.append(Problem(label, f"{r.field}.launch", "per_gpu launch needs tp = pp = 1 (one DP rank per GPU)"))
        if r.launch == "per_gpu" and not kind.per_gpu:
            out.append(Problem(label, f"{r.field}.launch", f"per_gpu launch is not supported for {kind.name}"))
    return out


def _arg_problems(recipe: Recipe) -> list[Problem]:
    doc, label, out = recipe.doc, recipe.source, []
    kind, roles = recipe.engine_kind, recipe.roles()
    arg_lists = [("engine.args", list(doc["engine"].get("args", [])))]
    arg_lists += [(f"{r.field}.args", list(r.args)) for r in roles if r.args]
    for fld, args in arg_lists:
        out += _arg_shape_problems(args, fld, label)
        out += _json_problems(args, fld, label)
        out += [Problem(label, f, reason) for f, reason in flags.owned_flag_problems(kind, args, fld)]
    fe_args = list((doc.get("frontend") or {}).get("args", []))
    out += _arg_shape_problems(fe_args, "frontend.args", label)
    out += [Problem(label, f, reason) for f, reason in flags.owned_frontend_flag_problems(fe_args)]
    return out


def _env_problems(recipe: Recipe) -> list[Problem]:
    doc, label, out = recipe.doc, recipe.source, []
    env_fields = [("env", doc.get("env", {}), None), ("engine.env", doc["engine"].get("env", {}), env_readers.WORKER)]
    env_fields += [("frontend.env", (doc.get("frontend") or {}).get("env", {}), env_readers.FRONTEND)]
    env_fields += [(f"{r.field}.env", r.env, env_readers.WORKER) for r in recipe.roles()]
    owned = launcher_env.owned(recipe.engine_kind)  # the launcher's own list
    out += limits.env_total_problems(env_fields, label)
    for fld, env, placed_on in env_fields:
        for k, v in env.items():
            wrong = (placed_on and env_readers.misplaced(k, placed_on)) or _env_value_problem(v)
            if k in owned:
                out.append(Problem(label, f"{fld}.{k}", f"{k} is set by the launcher per process; remove it"))
            elif wrong:
                out.append(Problem(label, f"{fld}.{k}", wrong))
            elif SECRET_NAME.search(k) and not isinstance(v, dict):
                out.append(
                    Problem(
                        label, f"{fld}.{k}",
                        f"{k} looks like a credential: a literal value would be written into every plan; "
                        f"name it by reference instead, {k}: {{from_env: {k}, secret: true}}",
                    )
                )  # fmt: skip
    for path, text in _strings(doc, ""):
        m = next((m for m in RUNTIME_REF.finditer(text) if m.group(3) not in USER_REF_NAMES), None)
        if m:
            out.append(Problem(label, path, f"{m.group(0)} is reserved for the launcher's runtime references"))
    return out


ENV_VALUE_MAX_BYTES = 32 * 1024  # one variable; Linux's limit for one is 128 KiB, a whole exec's 2 MiB


def _env_value_problem(v) -> str | None:
    """A value the stack could not start with: caught here, not as a dead stack 150 s later."""
    if not isinstance(v, str):
        return None
    if "\x00" in v:
        return "the value holds a NUL byte, which no process environment can carry"
    size = len(v.encode())
    return f"the value is {size} bytes; at most {ENV_VALUE_MAX_BYTES} (32 KiB)" if size > ENV_VALUE_MAX_BYTES else None


def cluster_problems(recipe: Recipe, cluster: Cluster) -> list[Problem]:
    """Meaning checks against one cluster: placeholders, placement, and fields it cannot honour."""
    out = []
    if recipe.doc.get("image") and not cluster.container_runtime:
        reason = (
            f"cluster {cluster.name!r} has no container runtime ({cluster.source}: container.runtime): the image "
            "would be ignored and the processes would run from the host's environment; remove image for this cluster"
        )
        out.append(Problem(recipe.source, "image", reason))
    for name, fields in sorted(placeholders_in(recipe.doc).items()):
        if name in RUNTIME_PLACEHOLDERS or name in cluster.placeholders:
            continue
        out.append(
            Problem(
                recipe.source,
                fields[0],
                f"placeholder {{{name}}} is not filled by cluster {cluster.name!r} ({cluster.source})",
            )
        )
    out += _data_path_problems(recipe, cluster) + profile_cluster_problems(recipe, cluster)
    try:
        slots = topology.place(recipe.roles(), cluster)
    except topology.PlacementError as e:
        return out + [Problem(recipe.source, f, r) for f, r in e.issues]
    nodes = max(s.node for s in slots) + 1
    placed = kinds.get(recipe.engine_kind).placement_problems(slots, cluster.name)
    out += [Problem(recipe.source, f, reason) for f, reason in placed]
    chosen = (recipe.doc.get("control_plane") or {}).get("discovery") or cluster.control_plane.get("discovery")
    if chosen == "file" and nodes > 1:
        out.append(
            Problem(
                recipe.source,
                "control_plane.discovery",
                f"file discovery on {nodes} nodes of {cluster.name!r}: Dynamo's file store only hears of files "
                "written through the local kernel (inotify), so the nodes would never see each other; use etcd",
            )
        )
    return out


def _data_path_problems(recipe: Recipe, cluster: Cluster) -> list[Problem]:
    """The model and a trace are read only from the cluster's declared data roots."""
    (kind, ds), *_ = recipe.doc["scenario"]["dataset"].items()
    read = {"model.path": recipe.doc["model"]["path"]}
    if isinstance(ds, dict) and "path" in ds:
        read[f"scenario.dataset.{kind}.path"] = ds["path"]
    chosen = pythons.problem(recipe.doc["engine"].get("python"), cluster)  # what a check may run, too
    out = [Problem(recipe.source, "engine.python", chosen)] if chosen else []
    for where, path in read.items():
        filled = PLACEHOLDER.sub(lambda m: cluster.placeholders.get(m.group(1), m.group(0)), path)
        left = re.search(r"\{[^{}]*\}?", filled)  # unfilled: no root to check it against, so refused
        why = f"{left.group(0)} is not a data directory cluster {cluster.name!r} fills in" if left else None
        why = why or cluster.data_path_problem(filled)
        if why:
            out.append(Problem(recipe.source, where, why))
    return out

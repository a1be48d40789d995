"""A recipe's ``profile`` section: its checks, and the profile's own plan and settings.

The profile runs on the recipe's stack started with the engine's profiler on (a start-up flag or
variable, or the processes wrapped in ``nsys``), so it gets a plan of its own beside the points'
(``.plans/<recipe>/profile-c<conc>.plan.json``): the points' plans never change with the section,
and a profiled engine's figures never land in a point (profiling slows the engine). The settings
file says which processes to start and stop, with which request, and where their traces go."""

from __future__ import annotations

import copy

from ..contract import paths
from ..contract.plan import ENGINE_ROLES
from ..fileio.encode import canonical, digest
from ..fileio.errors import Problem
from . import kinds

# (render/recipe asks these checks of its Recipe, so this module takes a recipe and a cluster untyped:
# importing their modules, even for types, would close a circle)

SETTINGS_SCHEMA = "servesweep.profile-settings/1"
DEFAULT_WINDOW_S = 5.0
# nsys's capture range follows the engine's own start/stop (vLLM's cuda profiler, SGLang's CUDA_PROFILER)
# (stop-shutdown: nsys writes its report when the range ends, not when the stack is stopped)
NSYS = [
    "nsys",
    "profile",
    "--capture-range=cudaProfilerApi",
    "--capture-range-end=stop-shutdown",
    "--trace=cuda,nvtx,osrt",
]


def section(recipe) -> dict | None:
    return recipe.doc.get("profile")


def problems(recipe) -> list[Problem]:
    """What no cluster changes: a kind with no profiler, a window given twice, roles the recipe lacks."""
    prof, label = section(recipe), recipe.source
    if prof is None:
        return []
    kind = kinds.get(recipe.engine_kind)
    out = []
    if kind.profiler is None:
        have = ", ".join(n for n in kinds.names() if kinds.get(n).profiler)
        reason = f"{kind.name} exposes no profiler start/stop here; kinds that do: {have}"
        out.append(Problem(label, "profile.kind", reason))
    if "window_s" in prof and "steps" in prof:
        out.append(Problem(label, "profile.steps", "give window_s or steps, not both"))
    if prof["kind"] == "nsys" and "steps" in prof:
        reason = "an nsys capture is bounded by the engine's start/stop in seconds; use window_s"
        out.append(Problem(label, "profile.steps", reason))
    have_roles = [r.name for r in recipe.roles()]
    for i, role in enumerate(prof.get("roles") or []):
        if role not in have_roles:
            reason = f"the recipe's topology has no {role} role (it has {', '.join(have_roles)})"
            out.append(Problem(label, f"profile.roles[{i}]", reason))
    return out


def cluster_problems(recipe, cluster) -> list[Problem]:
    """A profile field that could have no effect on this cluster."""
    prof = section(recipe)
    if prof is None or prof["kind"] != "nsys" or not cluster.cpu_engine:
        return []
    reason = f"cluster {cluster.name!r} runs the engines on CPUs: nsys would capture no CUDA work; use kind torch"
    return [Problem(recipe.source, "profile.kind", reason)]


def concurrency(recipe) -> int | None:
    prof = section(recipe)
    return None if prof is None else prof.get("concurrency") or recipe.concurrency[0]


def profile_files(recipe, point_plan: dict) -> tuple[dict, dict]:
    """(the profile's plan, its settings) from the point's plan at the profile's concurrency: the
    profiled roles' processes given the profiler, on a stack of its own (no warm stack shares it)."""
    prof, conc = section(recipe), concurrency(recipe)
    profiler = kinds.get(recipe.engine_kind).profiler
    plan = copy.deepcopy(point_plan)
    roles = prof.get("roles") or [r.name for r in recipe.roles()]
    steps = prof.get("steps")
    started = []
    for p in plan["processes"]:
        if p["role"] not in roles or p["role"] not in ENGINE_ROLES:
            continue
        traces = f"{{run_dir}}/{paths.PROFILE_TRACES}/{p['name']}"
        argv, env = profiler.enable(prof["kind"], traces, steps if profiler.steps_at_start else None)
        p["argv"] = p["argv"] + argv
        p["env"] = {**p["env"], **env}
        files = "*"
        if prof["kind"] == "nsys":  # in the run dir (nsys makes no folder); its report once the range ends
            traces, files = "{run_dir}", f"{p['name']}.nsys-rep"
            p["argv"] = [*NSYS, "--output", f"{traces}/{p['name']}", *p["argv"]]
        body = profiler.start_body(prof["kind"], traces, None if profiler.steps_at_start else steps)
        url = f"http://{{addr:self}}:{{port:self.{profiler.port}}}"
        started.append(
            {"name": p["name"], "role": p["role"], "traces": traces, "files": files, "body": body,
             "start": None if p["headless"] else url + profiler.start,
             "stop": None if p["headless"] else url + profiler.stop}
        )  # fmt: skip
    plan["stack"] = {**plan["stack"], "reuse": False}  # the profiled stack is its own, stopped after
    body = digest(canonical({k: v for k, v in plan.items() if k != "fingerprints"}))
    plan["fingerprints"] = {"plan": body, "curve": body, "server": digest(f"profile {body}")}  # no point's stack
    settings = {
        "schema": SETTINGS_SCHEMA, "recipe": recipe.name, "kind": prof["kind"], "concurrency": conc,
        "window_s": None if steps else float(prof.get("window_s", DEFAULT_WINDOW_S)), "steps": steps,
        "roles": roles, "processes": started,
    }  # fmt: skip
    return plan, settings

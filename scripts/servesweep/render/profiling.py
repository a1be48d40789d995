"""A recipe's ``profile`` section: its checks, the profiler its stack starts with, and the
profile's plan and settings.

A profiled engine starts differently (a start-up flag or variable, or its process wrapped in
``nsys``). With ``stack: shared`` (the default) every plan of the recipe starts the profiled roles'
processes with the profiler configured but idle, so the profile is one more turn on the recipe's
warm or held stack (no engine start of its own), taken between points: a point's window never
overlaps a capture. With ``stack: own`` the points' plans never change with the section and the
profile gets a stack of its own. Either way the profile's plan sits beside the points'
(``.plans/<recipe>/profile-c<conc>.plan.json``) with a settings file that says which processes to
start and stop, with which request, and where their traces go."""

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
# nsys's capture range follows the engine's own start/stop (vLLM's cuda profiler, SGLang's CUDA_PROFILER);
# repeat: a report per range, written when it ends, the process going on serving (stop-shutdown would
# end a shared stack's engine; plain stop writes the report only when the process exits)
NSYS = [
    "nsys",
    "profile",
    "--capture-range=cudaProfilerApi",
    "--capture-range-end=repeat",
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


def shared(recipe) -> bool:
    """Whether the recipe's profile is a turn on its points' stack (their plans carry the profiler)."""
    prof = section(recipe)
    return prof is not None and prof.get("stack", "shared") == "shared"


def _profiled(recipe, plan: dict) -> list[dict]:
    """The plan's processes the section profiles (engine roles only)."""
    roles = section(recipe).get("roles") or [r.name for r in recipe.roles()]
    return [p for p in plan["processes"] if p["role"] in roles and p["role"] in ENGINE_ROLES]


def arm_points(recipe, plan: dict, kind_name: str) -> None:
    """A point's plan (render/plan, in place): armed where the recipe's profile shares its stack."""
    if shared(recipe) and kinds.get(kind_name).profiler:
        arm(recipe, plan, kind_name)


def arm(recipe, plan: dict, kind_name: str) -> None:
    """Give the profiled roles' processes the profiler, configured but idle until its start request."""
    prof, profiler = section(recipe), kinds.get(kind_name).profiler
    steps = prof.get("steps") if profiler.steps_at_start else None
    for p in _profiled(recipe, plan):
        argv, env = profiler.enable(prof["kind"], _traces(prof, p["name"]), steps)
        p["argv"] = p["argv"] + argv
        p["env"] = {**p["env"], **env}
        if prof["kind"] == "nsys":
            p["argv"] = [*NSYS, "--output", f"{{run_dir}}/{p['name']}", *p["argv"]]


def _traces(prof: dict, process: str) -> str:
    # nsys makes no folder: its reports land in the run dir, named after the process
    return "{run_dir}" if prof["kind"] == "nsys" else f"{{run_dir}}/{paths.PROFILE_TRACES}/{process}"


def profile_files(recipe, point_plan: dict) -> tuple[dict, dict]:
    """(the profile's plan, its settings) from the point's plan at the profile's concurrency: shared,
    that plan as it is (already armed); own, the profiled processes armed on a stack of its own."""
    prof, conc = section(recipe), concurrency(recipe)
    profiler = kinds.get(recipe.engine_kind).profiler
    plan = copy.deepcopy(point_plan)
    if not shared(recipe):
        arm(recipe, plan, recipe.engine_kind)
        plan["stack"] = {**plan["stack"], "reuse": False}  # the profiled stack is its own, stopped after
        body = digest(canonical({k: v for k, v in plan.items() if k != "fingerprints"}))
        plan["fingerprints"] = {"plan": body, "curve": body, "server": digest(f"profile {body}")}  # no point's stack
    steps = prof.get("steps")
    started = []
    for p in _profiled(recipe, plan):
        traces = _traces(prof, p["name"])
        # nsys's report per range: <name>.nsys-rep or <name>.<n>.nsys-rep (never agg-10's for agg-1)
        files = [f"{p['name']}.nsys-rep", f"{p['name']}.*.nsys-rep"] if prof["kind"] == "nsys" else ["*"]
        body = profiler.start_body(prof["kind"], traces, None if profiler.steps_at_start else steps)
        url = f"http://{{addr:self}}:{{port:self.{profiler.port}}}"
        started.append(
            {"name": p["name"], "role": p["role"], "traces": traces, "files": files, "body": body,
             "start": None if p["headless"] else url + profiler.start,
             "stop": None if p["headless"] else url + profiler.stop}
        )  # fmt: skip
    settings = {
        "schema": SETTINGS_SCHEMA, "recipe": recipe.name, "kind": prof["kind"], "concurrency": conc,
        "window_s": None if steps else float(prof.get("window_s", DEFAULT_WINDOW_S)), "steps": steps,
        "roles": prof.get("roles") or [r.name for r in recipe.roles()], "processes": started,
        "stack": "shared" if shared(recipe) else "own",
    }  # fmt: skip
    return plan, settings

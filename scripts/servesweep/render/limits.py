"""Hard caps on what a rendered plan asks the OS to exec, below the OS's own limits.

Each value of a recipe may be within its bound and an alias repeat it into a plan that fails exec
with E2BIG on the cluster (Linux: 2 MiB of argv + environment per exec, 128 KiB per string); or a
plan of hundreds of megabytes that every dry run writes and reads. Caught while rendering, named;
with the bounds only the rendered plan can tell (the workers that register).
"""

from __future__ import annotations

from ..fileio.errors import InputError, Problem

EXEC_MAX_BYTES = 256 * 1024  # one process's argv + environment, as rendered
ENV_TOTAL_MAX_BYTES = 128 * 1024  # a recipe's variables together, checked at load
PLAN_EXEC_MAX_BYTES = 4 * 1024 * 1024  # all processes of one plan together


def _sizes(proc: dict) -> tuple[int, int]:
    """(argv bytes, environment bytes) as exec counts them: each string with its NUL."""
    argv = sum(len(str(a).encode()) + 1 for a in proc.get("argv") or ())
    env = sum(
        len(k.encode()) + 2 + (len(v.encode()) if isinstance(v, str) else 64)
        for k, v in (proc.get("env") or {}).items()
    )
    return argv, env


def plan_problems(plan: dict, source: str) -> list[Problem]:
    """Why the plan's processes could not be started: a process or the plan past its cap."""
    out, total = [], 0
    for proc in plan.get("processes") or ():
        argv, env = _sizes(proc)
        total += argv + env
        if argv + env > EXEC_MAX_BYTES:
            field = "env" if env >= argv else "engine.args"
            reason = (
                f"process {proc.get('name')}'s argv ({argv} bytes) and environment ({env} bytes) total "
                f"{argv + env} bytes once rendered; at most {EXEC_MAX_BYTES} (256 KiB) per process"
            )
            out.append(Problem(source, field, reason))
    if total > PLAN_EXEC_MAX_BYTES:
        reason = (
            f"the plan's processes' argv and environments total {total} bytes; at most {PLAN_EXEC_MAX_BYTES} (4 MiB)"
        )
        out.append(Problem(source, "(plan)", reason))
    return out


def env_total_problems(env_fields: list, label: str) -> list[Problem]:
    """``env_fields``: (field, mapping, ...) of a recipe. Each value may be within its bound and all of
    them together still fail exec (E2BIG): refused before anything is rendered."""
    total = sum(len(k) + 2 + len(v.encode()) for _, env, *_ in env_fields for k, v in env.items() if isinstance(v, str))
    if total <= ENV_TOTAL_MAX_BYTES:
        return []
    reason = f"the recipe's environment variables total {total} bytes; at most {ENV_TOTAL_MAX_BYTES} (128 KiB) together"
    return [Problem(label, "env", reason)]


def registration_problems(plan: dict, recipe_doc: dict, source: str) -> list[Problem]:
    """The frontend's router waits for ``min_initial_workers``: never more than the plan's workers register."""
    wanted = ((recipe_doc.get("frontend") or {}).get("router") or {}).get("min_initial_workers")
    expected = plan.get("expect_registrations") or {}
    serving = expected.get("backend", sum(expected.values()))  # decode or aggregated workers route requests
    if wanted is None or not expected or wanted <= serving:  # no registrations: no frontend waits
        return []
    reason = f"{wanted} is more than the {serving} workers this plan registers: the router would wait for ever"
    return [Problem(source, "frontend.router.min_initial_workers", reason)]


def check(plan: dict, recipe_doc: dict, source: str) -> None:
    """Raise InputError naming the recipe's field when the rendered plan is past a cap or a bound."""
    problems = plan_problems(plan, source) + registration_problems(plan, recipe_doc, source)
    if problems:
        raise InputError(problems)

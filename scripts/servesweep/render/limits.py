"""Hard caps on what a rendered plan asks the OS to exec, below the OS's own limits.

Each value of a recipe may be within its bound and an alias repeat it into a plan that fails exec
with E2BIG on the cluster (Linux: 2 MiB of argv + environment per exec, 128 KiB per string); or a
plan of hundreds of megabytes that every dry run writes and reads. Caught while rendering, named;
with the bounds only the rendered plan can tell (the workers that register).
"""

from __future__ import annotations

from ..fileio.errors import InputError, Problem

EXEC_MAX_BYTES = 256 * 1024  # one process's argv + environment, as rendered
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

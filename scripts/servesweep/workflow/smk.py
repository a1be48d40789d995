"""The one place that reads Snakemake's internals (the rules call these, never ``workflow.*``
attributes beyond the documented ones): the run's targets and forcing, the name a group job gets,
the per-job callables' parameter cache. Each is checked against the Snakemake versions it is known
to work with; another version stops at once with what to do, not with a traceback mid-run.
"""

from __future__ import annotations

import functools
import inspect
import os
import sys

from ..contract import paths

SUPPORTED = ((9, 0), (10, 0))  # [from, to): the releases these internals were read from


def _version(text: str) -> tuple[int, int]:
    parts = (text.split("+")[0].split(".") + ["0", "0"])[:2]
    return tuple(int("".join(ch for ch in p if ch.isdigit()) or 0) for p in parts)


def check_version(version: str) -> str | None:
    """None if this Snakemake is one servesweep knows; else why not and what to do."""
    low, high = SUPPORTED
    if low <= _version(version) < high:
        return None
    return (
        f"servesweep: Snakemake {version} is not supported (known: {'.'.join(map(str, low))} to before "
        f"{'.'.join(map(str, high))}); install the pinned one: `make setup` (pyproject.toml)"
    )


def require_supported(version: str) -> None:
    problem = check_version(version)
    if problem:
        print(problem, file=sys.stderr)
        raise SystemExit(2)


def dry_run(workflow, argv: list[str] | None = None) -> bool:
    """Whether this is `snakemake -n`. At parse time Snakemake 9 has chosen no executor yet
    (``workflow.dryrun`` is False until the DAG runs), so the command line says it."""
    if getattr(workflow, "dryrun", False):
        return True
    for arg in sys.argv[1:] if argv is None else argv:
        if arg in ("--dry-run", "--dryrun", "--just-print"):
            return True
        if arg.startswith("-") and not arg.startswith("--") and arg[1:].isalpha() and "n" in arg[1:]:
            return True  # -n, or combined short flags such as -np
    return False


def target_recipes(argv: list[str] | None = None) -> frozenset[str] | None:
    """The recipes this run's command-line targets belong to, when each is one of their files
    (``results/<recipe>/…``, ``results/rehearsal/<recipe>/…``); None when a target may need every
    recipe (the default target, the summary, plots). Snakemake's own parser reads the command line."""
    args = _cli_args(None if argv is None else tuple(argv))
    if args is None:
        return None
    targets = args.targets or ()
    names = {paths.recipe_of_target(os.path.normpath(t)) for t in targets}
    return None if None in names else (frozenset(names) or None)


FORCIBLE_POINT_RULES = {"point", "held_point"}


def run_scope(workflow) -> tuple[frozenset, bool]:
    """(targets, forced) of this run: from the DAG settings once there are any, else (at parse
    time, when a Slurm run prints its bill) from the command line as Snakemake's own parser reads it."""
    dag = getattr(workflow, "dag_settings", None)
    if dag is not None:
        forced = dag.forceall or dag.forcetargets or FORCIBLE_POINT_RULES & set(dag.forcerun or ())
        return frozenset(dag.targets or ()), bool(forced)
    args = _cli_args()
    if args is None:
        return frozenset(), False
    forced = args.forceall or args.force or FORCIBLE_POINT_RULES & set(args.forcerun or ())
    return frozenset(args.targets or ()), bool(forced)


@functools.cache
def _cli_args(argv: tuple[str, ...] | None = None):
    """This process's command line through Snakemake's own parser; None if it is not one."""
    from snakemake.cli import get_argument_parser

    try:
        return get_argument_parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    except SystemExit:  # not a command line Snakemake would run
        return None


def wildcards_only(fn):
    """A per-job callable whose parameters Snakemake need not look up again for every job
    (inspect.signature per job and per callable is a measurable share of a large dry run)."""
    fn._overwrite_params = inspect.signature(fn).parameters
    return fn


POINT_RULES = {"point": False, "held_point": False, "rehearse_point": True}  # rule -> rehearsal
CHECK_RULES = {
    "smoke": "smoke",
    "held_smoke": "smoke",
    "eval": "eval-{benchmark}",
    "held_eval": "eval-{benchmark}",
    "profile": "profile-c{conc}",  # a turn on the points' stack when the profile shares it (render/profiling)
    "held_profile": "profile-c{conc}",
}


def jobs_to_run(workflow) -> tuple[list[tuple[str, int, bool]], list[tuple[str, str]], list[str], bool]:
    """The points (recipe, conc, rehearsal), checks (recipe, check) and capacity searches (recipe) of
    the jobs Snakemake is about to run, read from its DAG once it is final (the onstart hook): the
    stack keepers' counts; and whether a summary runs (a halving sweep is decided for it)."""
    points, checks, searches, summarized = [], [], [], False
    for job in workflow.dag.needrun_jobs():
        name, wc = job.rule.name, dict(job.wildcards)
        if name in POINT_RULES:
            points.append((wc["recipe"], int(wc["conc"]), POINT_RULES[name]))
        elif name in CHECK_RULES:
            checks.append((wc["recipe"], CHECK_RULES[name].format(**wc)))
        elif name == "capacity":
            searches.append(wc["recipe"])
        summarized |= name in ("summary", "rehearsal_summary")
    return points, checks, searches, summarized

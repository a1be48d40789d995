"""The Snakefile's entry into render: `--config` checked; in the main snakemake process every
recipe validated and the run's files written before the DAG is built (:func:`load_or_exit`). The
nested snakemake a cluster job starts loads nothing: it reads the plan it was submitted with
(``workflow/rulekit.JobKit``), so a recipe edited or broken while jobs wait in the queue changes
nothing they run.
"""

from __future__ import annotations

import contextlib
import gc
import sys
from pathlib import Path

from ..contract import paths
from ..fileio.errors import InputError, Problem, shown
from . import why
from .bill import say_bill
from .selection import Selection
from .writer import RunFiles

CONFIG_KEYS = {
    "cluster": "the cluster to run on (a profile's cluster name)",
    "recipes": "comma-separated recipe names to select",
    "rehearsal": "1: render rehearsal plans (mockers, this host)",
    "stack_reuse": "0: one stack per point for this run",
    "partial": "1: summarise the results that exist",
    "baseline": "a results directory to compare with",
    "linger_s": "seconds every stack of this run stays up after its last point (a follow-up run attaches)",
    "canary": "0: on Slurm, a held stack that died does not end its server configuration's other points",
    "budget_gpu_h": "refuse a sweep whose bill is bound above this many GPU-hours (overrides sweep.budget_gpu_h)",
}


def linger_override(config: dict) -> float | None:
    """--config linger_s, checked by check_config_or_exit."""
    return float(config["linger_s"]) if "linger_s" in config else None


def _say_parsers(sel, listed: int = 5) -> None:
    """Which parser checked the arguments of each selected recipe and engine kind, or why none: a line
    each, or one line per parser when more than ``listed`` share it (a large sweep stays legible)."""
    by_parser: dict[str, list[str]] = {}
    for what, parser in sorted(sel.checked_args.items()):
        by_parser.setdefault(parser, []).append(what)
    for parser, whats in sorted(by_parser.items()):
        if len(whats) > listed:
            whats = [f"{len(whats)} recipes (e.g. {whats[0]})"]
        for what in whats:
            print(f"servesweep: engine arguments of {shown(what)} checked by {shown(parser)}", file=sys.stderr)
    for what, reason in sorted(sel.unchecked_args.items()):
        print(f"servesweep: engine arguments of {shown(what)} not parser-checked: {shown(reason)}", file=sys.stderr)


BOOLEAN_CONFIG = ("rehearsal", "stack_reuse", "partial", "canary")


TEXT_CONFIG = ("cluster", "recipes", "baseline")  # Snakemake reads `--config k=[a]` as a list: refused here


def _typed_config_problems(config: dict) -> list[Problem]:
    """Booleans are booleans, names are text, a baseline is a results folder, a recipe is listed once."""
    out = [
        Problem(
            "--config", key, f"{shown(config[key])[:60]!r} is a {type(config[key]).__name__}, not text: give one name"
        )
        for key in TEXT_CONFIG
        if key in config and not isinstance(config[key], str)
    ]
    config = {k: v for k, v in config.items() if k not in TEXT_CONFIG or isinstance(v, str)}
    for key in BOOLEAN_CONFIG:
        if key in config and str(config[key]).lower() not in ("0", "1", "true", "false"):
            out.append(Problem("--config", key, f"{str(config[key])[:60]!r} is not a boolean: give 1 or 0"))
    if "baseline" in config:
        base = Path(str(config["baseline"]))
        looks = base.is_dir() and not base.is_symlink() and (
            (base / paths.SUMMARY_CSV.name).is_file() or paths.point_files(base, every_recipe=True)
        )  # fmt: skip
        if not looks:
            csv = paths.SUMMARY_CSV.name
            reason = f"{str(base)[:200]!r} is not a results folder (no {csv}, no <recipe>/c<conc>.json)"
            out.append(Problem("--config", "baseline", reason))
    names = [r for r in str(config.get("recipes", "")).split(",") if r]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        out.append(Problem("--config", "recipes", f"listed more than once: {', '.join(twice)[:200]}"))
    return out


def check_config_or_exit(config: dict) -> None:
    """`--config` keys are checked like recipe keys: a misspelled one is an error with a suggestion,
    never silently ignored."""
    import difflib

    problems = []
    for key in sorted(map(str, config)):
        if key not in CONFIG_KEYS:
            hint = difflib.get_close_matches(key, list(CONFIG_KEYS), n=1, cutoff=0.6)
            known = f"did you mean {hint[0]!r}?" if hint else "known: " + ", ".join(sorted(CONFIG_KEYS))
            problems.append(Problem("--config", key, f"unknown key {key!r} ({known})"))
    problems += _typed_config_problems(config)
    if "linger_s" in config:
        try:  # a boolean is not a number (`linger_s=True` would be 1 s)
            ok = not isinstance(config["linger_s"], bool) and 0 <= float(config["linger_s"]) <= 86400
        except (TypeError, ValueError):
            ok = False
        if not ok:
            reason = f"{config['linger_s']!r} is not a number of seconds in 0..86400"
            problems.append(Problem("--config", "linger_s", reason))
    if "budget_gpu_h" in config and budget_override(config) is None:
        reason = f"{str(config['budget_gpu_h'])[:60]!r} is not a positive number of GPU-hours"
        problems.append(Problem("--config", "budget_gpu_h", reason))
    if problems:
        print(InputError(problems).report(), file=sys.stderr)
        raise SystemExit(2)


def budget_override(config: dict) -> float | None:
    """--config budget_gpu_h as a number (a boolean is not one), None when absent or unusable."""
    value = config.get("budget_gpu_h")
    if value is None or isinstance(value, bool):
        return None
    try:
        hours = float(value)
    except (TypeError, ValueError):
        return None
    return hours if 0 < hours < 1e9 else None


def load_or_exit(
    root: Path,
    cluster: str,
    only: list[str] | None = None,
    rehearsal: bool = False,
    main_process: bool = True,
    scope=None,
    linger_s: float | None = None,
    dry_run: bool = False,
    targeted=None,
    canary: bool = True,
) -> RunFiles | None:
    """For the Snakefile: validate, write the run's files (the writer, which the onstart hook asks
    again, holds the selection); a clean report and exit 2 instead of a traceback. None in a job's
    nested snakemake: it only reads what the main process wrote. The caller makes its process's
    outputs private (rules/common.smk): loading never changes the umask of whoever loads it. A dry
    run names unusable results and moves nothing (Snakemake lists their points once a real run has
    moved them aside: at parse time it has no DAG settings to force them with)."""
    if not main_process:
        return None
    with gc_paused():
        return _load(root, cluster, (only, targeted), rehearsal, scope, (linger_s, canary), dry_run)


@contextlib.contextmanager
def gc_paused():
    """The load makes no reference cycles worth collecting, but its allocations would trigger full
    collections that walk all of Snakemake's heap (imports, rules) several times."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _load(root: Path, cluster: str, chosen: tuple, rehearsal: bool, scope, stacks: tuple, dry_run: bool) -> RunFiles:
    """``chosen``: (the recipes --config names, () -> the recipes the targets name); ``stacks``:
    (--config linger_s, --config canary)."""
    try:
        sel = Selection(root, cluster, *chosen, scope=scope, linger_s=stacks[0], rehearsal=rehearsal)
        files = RunFiles(sel, canary=stacks[1])
        files.write_plans()
        if sel.preflight_problems:
            raise InputError(sel.preflight_problems)
        for problem in sel.broken:
            print(f"servesweep: warning: not selected and broken: {problem}", file=sys.stderr)
        _say_unchecked(sel.preflight_notes)
        _say_parsers(sel)
        for line in why.cause_lines(sel.staleness()):
            print(f"servesweep: {line}", file=sys.stderr)
        say_bill(sel)
        trials = [r.name for r in sel.untried()]  # a search may choose any later
        for line in why.quarantine(sel.root, [r.name for r in sel.selected] + trials, move=not dry_run):
            print(f"servesweep: warning: {line}", file=sys.stderr)
        files.write_missing()
        if rehearsal:
            files.write_plans(rehearsal=True)
            files.write_missing(rehearsal=True)
        files.write_selection()
        return files
    except InputError as e:
        print(e.report(), file=sys.stderr)
        raise SystemExit(2) from None


def _say_unchecked(notes: list[str]) -> None:
    unique = sorted(set(notes))
    if unique:
        print(
            f"servesweep: pre-flight left {len(unique)} check(s) to the jobs (not checkable from this host), "
            f"e.g. {unique[0]}",
            file=sys.stderr,
        )

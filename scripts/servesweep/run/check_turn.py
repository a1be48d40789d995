"""A check's turn on a recipe's stack (the API smoke, an accuracy eval): like a point, it joins the
run's warm stack (no engine start of its own when the points run in the same snakemake run), keeps
an earlier attempt's logs, writes its file only when it validates, and always releases the stack."""

from __future__ import annotations

import signal
from collections.abc import Callable
from pathlib import Path

from ..contract import paths
from ..contract.plan import Plan
from ..fileio.encode import canonical
from ..fileio.files import write_if_changed
from ..fileio.yamlio import schema_errors
from .attempts import keep_earlier_attempt
from .driver import FAILURES, open_stack
from .driver_io import Interrupted, Say, now, private_plan, raise_interrupt

# (plan, the attached stack, the check's log dir, say) -> the check's document
Measure = Callable[[Plan, object, Path, Say], dict]


def take_turn(
    plan_path: Path, out_path: Path, check: str, schema_file: str, measure: Measure, join: Path | None = None
) -> int:
    """Exit status: 0 written, 1 failed (said in the check's driver.log), 2 unusable plan, 128+N signal.
    ``join``: the held stack it runs on, as a step of that stack's Slurm job (run/stacks/held)."""
    plan = private_plan(plan_path)
    if plan is None:
        return 2
    run_dir = Path.cwd() / paths.check_log_dir(plan.recipe, check)
    keep_earlier_attempt(run_dir)
    run_dir.mkdir(parents=True)
    say = Say(f"{plan.recipe} {check}", run_dir / paths.DRIVER_LOG)
    old = {s: signal.signal(s, raise_interrupt) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    stack = open_stack(plan, Path(plan_path), Path(out_path).resolve(), run_dir, say, join)
    try:
        stack.attach()
        doc = measure(plan, stack, run_dir, say)
        errors = schema_errors(doc, schema_file)
        if errors:
            raise ValueError(f"{check} file does not match schemas/{schema_file}: {errors[0].message}")
        write_if_changed(Path(out_path), canonical(doc))
        return 0
    except FAILURES as e:
        say(f"FAILED: {e}")
        return 1
    except Interrupted as e:
        say(f"interrupted by {e}; tearing down")
        return 128 + e.signum
    except Exception as e:  # noqa: BLE001 - a bug of ours: said in one line, the stack still released
        say(f"FAILED unexpectedly: {type(e).__name__}: {e}")
        return 1
    finally:
        for s in old:
            signal.signal(s, signal.SIG_IGN)
        stack.detach()
        for s, h in old.items():
            signal.signal(s, h)


def identity(plan: Plan, stack) -> dict:
    """What every check file records of the stack it ran on."""
    return {
        "recipe": plan.recipe,
        "cluster": plan.cluster,
        "rehearsal": plan.rehearsal,
        "engine": plan.engine,
        "plan_fingerprint": plan.fingerprints["plan"],
        "server_fingerprint": plan.fingerprints["server"],
        "stack": stack.info.id,
        "time": now(),
    }

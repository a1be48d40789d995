"""What a warm stack (``stacks/warm``) and a held one (``stacks/held``) share: where a server
identity's stacks live, the curve file's hint, the snakemake a point serves, and a new stack's id,
directory and keeper argv (``servesweep keep-stack``)."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import psutil

from ...contract import paths
from ...contract.plan import CurveHint, Plan, curve_file, read_curve


def snakemake_ancestor() -> int | None:
    """The outermost snakemake process above this point: the main one locally; in a Slurm group job
    the one in the batch step that runs every member (each member runs in a snakemake of its own)."""
    found = None
    try:
        p = psutil.Process().parent()
        while p is not None:  # `snakemake ...`, `python .../bin/snakemake ...` or `python -m snakemake ...`
            if any(Path(part).name == "snakemake" for part in p.cmdline()[:3]):
                found = p.pid
            p = p.parent()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        pass
    return found


def stacks_root(plan: Plan) -> Path:
    """Where the stacks of the plan's server identity live: points of any recipe with the same
    servers (they differ only in what the client does) join the same stack."""
    return Path.cwd() / paths.stacks_dir(plan.fingerprints["server"], plan.rehearsal)


def curve_state(plan: Plan) -> CurveHint:
    """Points expected, whether a capacity search of the curve will ask for more probes (the main
    process learns of each probe only once the previous one has run), and the linger."""
    return read_curve(Path.cwd() / curve_file(plan.fingerprints["server"], plan.rehearsal))


def expected_points(plan: Plan) -> int:
    """How many points of this curve the main process expected to run (a hint for an early
    teardown; the idle timeout covers a wrong guess)."""
    return curve_state(plan).expected


def new_stack_dir(root: Path, server: str) -> Path:
    """A new stack's directory under its server identity's stacks ``root``; its name is the stack's id
    (the server's first 8 digits, the time, the starting point's pid)."""
    d = root / f"{server[:8]}-{int(time.time() * 1000) % 10**10}-{os.getpid()}"
    d.mkdir(parents=True)
    return d


def keeper_argv(plan: Plan, plan_path: Path, stack_dir: Path, watch: int, result_path: Path) -> list[str]:
    """``servesweep keep-stack`` for the stack in ``stack_dir`` (its id: the dir's name). ``watch``: the
    snakemake pid the keeper follows (0: none it can see, a held stack's, whose job runs elsewhere)."""
    argv = [sys.executable, "-m", "servesweep", "keep-stack", str(plan_path), "--dir", str(stack_dir)]
    argv += ["--id", stack_dir.name, "--watch", str(watch), "--expect", str(expected_points(plan))]
    return argv + ["--result", str(result_path)]

"""Pre-flight: every input and output a point needs, checked before an engine starts.

In the job (``in_job``) every failed check is a problem and nothing starts. From the
submitting host (the dry run) a Slurm plan's paths may live on cluster filesystems this
host cannot see: those become notes saying what was left to the job.
"""

from __future__ import annotations

import functools
import os
import shutil
import sys
from pathlib import Path

from ..contract.paths import LOGS
from ..contract.plan import Plan, host_side
from ..fileio.errors import Problem, shown


class PreflightFailed(Exception):
    def __init__(self, problems: list[Problem]):
        self.problems = problems
        super().__init__("pre-flight failed, nothing started:\n" + "\n".join(f"  {p}" for p in problems))


def _host_path(path: str, workdir: Path, mounts: list[str]) -> Path | None:
    """Where a path an engine process sees lies on the host (None: only inside the image). A relative
    path lies in the workflow dir, which every container mounts at the same path."""
    if not mounts or not Path(path).is_absolute():
        return workdir / path
    host = host_side(path, mounts)
    return None if host is None else Path(host)


def _container_side(recipe: str, field: str, path: str, workdir: Path, mounts: list[str], check) -> list:
    """A path a process in the container reads: checked through the mount it lies under; a path under
    no mount that exists on the host is a host path the container cannot see (the wrong side)."""
    host = _host_path(path, workdir, mounts)
    if host is not None:
        where = f"host side: {host}" if mounts else "on this host"
        return [(recipe, field, f"{path} not found ({where})", check(host))]
    if Path(path).exists():
        reason = (
            f"{path} is a host path, but the process that reads it runs in the container, which sees "
            f"only its mounts ({', '.join(mounts)}): use the path inside the container"
        )
        return [(recipe, field, reason, False)]
    return []  # inside the image: the container start tells


@functools.lru_cache(maxsize=4096)  # a dry run asks the same few commands once per recipe
def _executable(cmd: str, workdir: Path) -> bool:
    if "/" not in cmd:
        return shutil.which(cmd) is not None
    p = workdir / cmd
    return p.is_file() and os.access(p, os.X_OK)


def _writable(path: Path) -> bool:
    """A directory that exists and is writable, or can be made under one (a file in the way: no)."""
    while not path.exists():
        path = path.parent
    return path.is_dir() and os.access(path, os.W_OK)


def _client_checks(plan: Plan, workdir: Path, result: Path) -> list[tuple[str, str, str, bool]]:
    """What the point's own client reads and writes (aiperf, its dataset and tokenizer cache, the
    result): checked per point, since points of several recipes share one stack."""
    b, recipe, facts = plan.benchmark, plan.recipe_file, f"cluster {plan.run_cluster}"
    mounts = (plan.container or {}).get("mounts", [])
    out = [(facts, "aiperf", f"aiperf executable {b.aiperf!r} not found", _executable(b.aiperf, workdir))]
    if "path" in b.dataset:
        path, fld = b.dataset["path"], f"scenario.dataset.{b.dataset['kind']}.path"
        side = " on the host, where aiperf reads it" + (" (through the container's mounts)" if mounts else "")
        folder = b.dataset.get("format") == "weka"  # a folder of trace files (or one file)
        found = (workdir / path).exists() if folder else (workdir / path).is_file()
        out.append((recipe, fld, f"{path} does not exist{side}", found))
    if b.hf_home:
        out.append((facts, "hf_home", f"{b.hf_home} is not a directory", (workdir / b.hf_home).is_dir()))
    if b.dataset["kind"] == "public":  # the site's copy, where the datasets library looks offline
        cached = (
            Path(b.hf_home or "~/.cache/huggingface").expanduser()
            / "hub"
            / ("datasets--" + b.dataset["hf_repo"].replace("/", "--"))
        )
        reason = f"{b.dataset['name']} is not in the Hugging Face cache ({cached}); nothing is downloaded"
        out.append((recipe, "scenario.dataset.public.name", reason, (workdir / cached).is_dir()))
    reason = f"{result.parent} is not a writable directory (or a file is in its way)"
    out.append((recipe, "result", reason, _writable(result.parent)))
    return out


def _server_checks(plan: Plan, workdir: Path) -> list[tuple[str, str, str, bool]]:
    """What the stack's processes read and run: checked once, before the stack starts."""
    recipe, facts = plan.recipe_file, f"cluster {plan.run_cluster}"
    mounts = [m.replace("{workdir}", str(workdir)) for m in (plan.container or {}).get("mounts", [])]
    out = _container_side(recipe, "model.path", plan.model["path"], workdir, mounts, Path.exists)
    script = (plan.setup or {}).get("post_install")
    if script and not plan.rehearsal:
        out += _container_side(recipe, "setup.post_install", script, workdir, mounts, Path.is_file)
    if not plan.container:
        for p in plan.processes:
            cmd = p.argv[0]
            if not cmd.startswith("{"):
                out.append((facts, f"process {p.name}", f"executable {cmd!r} not found", _executable(cmd, workdir)))
    out.append((recipe, "logs", f"{workdir / LOGS} is not writable", _writable(workdir / LOGS)))
    return out


SIDES = ("client", "server")


def check_plan(
    plan: Plan, workdir: Path, result: Path, in_job: bool, sides: tuple[str, ...] = SIDES
) -> tuple[list[Problem], list[str]]:
    """(problems, notes about what this host could not check); ``sides``: the client's checks
    (each point's), the server's (the stack's), or both."""
    problems, notes, seen = [], [], set()
    remote = plan.launcher == "slurm" and not in_job
    checks = (_client_checks(plan, workdir, result) if "client" in sides else []) + (
        _server_checks(plan, workdir) if "server" in sides else []
    )
    for owner, field, reason, ok in checks:
        if ok or (owner, field) in seen:
            continue
        seen.add((owner, field))
        if remote:
            notes.append(f"{owner}: {field}: not visible from this host ({reason}); the job checks it first")
        else:
            problems.append(Problem(owner, field, reason))
    if plan.container and "server" in sides:
        notes.append("executables inside the image are checked when its container starts")
    return problems, notes


def client_warnings(plan: Plan, in_job: bool, concurrencies: list[int] | None = None) -> list[str]:
    """Whether a concurrency (the point's, or ``concurrencies`` of its curve) is beyond what the client's
    cores carry: in the job the cores it has (its affinity), before it the cores the plan gives it
    (run/client_cpu). A warning, not a refusal."""
    from ..run import client_cpu

    cores = client_cpu.cores_of() if in_job else client_cpu.planned_cores(plan)
    why = client_cpu.beyond_cores(concurrencies or [plan.benchmark.concurrency], cores)
    return [f"{plan.recipe_file}: concurrency: {why}"] if why else []


def warn_client(plan: Plan, concurrencies: list[int]) -> None:
    """Before the job (the dry run, once per curve): a warning on a line of its own."""
    for warning in client_warnings(plan, in_job=False, concurrencies=concurrencies):
        print(f"servesweep: warning: {shown(warning)}", file=sys.stderr)


def require(plan: Plan, workdir: Path, result: Path, side: str, say) -> None:
    """In a job, before anything of ``side`` starts: say what this host could not check, and raise
    PreflightFailed with every problem."""
    problems, notes = check_plan(plan, workdir, result, in_job=True, sides=(side,))
    for note in notes + (client_warnings(plan, in_job=True) if side == "client" else []):
        say(f"pre-flight: {note}")
    if problems:
        raise PreflightFailed(problems)

"""run-held-point (and run-held-check): a point (a check) on a held stack, from the main snakemake's host.

A Slurm group job ends before Snakemake re-evaluates a checkpoint, so a capacity search would start
its engines once per probe. Here the stack is a Slurm job of its own (``sbatch``: the stack keeper as
its batch script, sized from render's hold request), started by the first point that needs it and
found in the registry (``current.json``) by the next ones, also by a follow-up snakemake while it
lingers. Each point runs its driver as a step of that job on its batch host (``srun --jobid
--overlap``), where it joins the stack as any point joins a warm one. The job ends when the keeper
does: its points are done (and its linger is over), it was idle too long, or the snakemake it
serves is gone (heartbeat).
"""

from __future__ import annotations

import json
import math
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from ..contract import paths
from ..contract.heartbeat import ENV as HEARTBEAT_ENV
from ..contract.plan import CurveHint, Plan, batch_step_tasks, sbatch_args, slurm_resources
from ..contract.stack_registry import Current
from ..fileio.errors import plain_text
from ..fileio.yamlio import checked_json
from .curve import curve_state, expected_points, snakemake_ancestor, stacks_root
from .driver import default_log_dir, keep_earlier_attempt
from .driver_io import Say, now, private_plan
from .slurm import AllocationError, query
from .stackdir import Registry, StackDir, State, alive

LIVE = ("PENDING", "CONFIGURING", "RUNNING")
HOLD_MARGIN_S = 300  # over the estimate: teardown, and snakemake re-evaluating between points
POLL_S = float(os.environ.get("SERVESWEEP_SQUEUE_POLL_S", "2"))
HOLD_SCRIPT = '#!/bin/sh\n# a held stack: the keeper is this job\'s batch script (run/held.py)\nexec "$@"\n'


@dataclass(frozen=True)
class HoldRequest:
    """What the stack's own job asks Slurm for: the plan's shape (as a group job would ask), and a
    time limit covering one startup, every point expected on it, the searches' worst case of further
    probes and the linger (the curve file's ``points_s`` and ``linger_s``), plus a margin."""

    nodes: int
    tasks: int
    gpus_per_node: int
    exclusive: bool
    cpus_per_task: int
    mem_mb: int
    time_min: int
    partition: str | None = None
    account: str | None = None

    @classmethod
    def of(cls, plan: Plan, hint: CurveHint, partition: str | None, account: str | None) -> HoldRequest:
        res = batch_step_tasks(plan.resources)
        points_s = hint.points_s or hint.expected * res["point_s"]
        minutes = math.ceil((res["startup_s"] + points_s + hint.linger_s + HOLD_MARGIN_S) / 60)
        shape = (
            res["nodes"],
            res["tasks"],
            res["gpus_per_node"],
            res["exclusive"],
            res["cpus_per_task"],
            res["mem_mb"],
        )
        return cls(*shape, minutes, partition, account)

    def sbatch_options(self) -> list[str]:
        shape = {
            "nodes": self.nodes,
            "tasks": self.tasks,
            "gpus_per_node": self.gpus_per_node,
            "exclusive": self.exclusive,
        }
        shape |= {"cpus_per_task": self.cpus_per_task, "mem_mb": self.mem_mb, "runtime_min": self.time_min}
        out = sbatch_args(slurm_resources(shape))
        out += [f"--partition={self.partition}"] if self.partition else []
        return out + ([f"--account={self.account}"] if self.account else [])


@dataclass(frozen=True)
class Job:
    id: str
    state: str  # Slurm's, or GONE once the controller forgot it
    host: str  # its batch host
    left_s: float | None  # time left before its limit

    @property
    def live(self) -> bool:
        return self.state in LIVE


def job(job_id: str) -> Job:
    try:
        out = query(["squeue", "-h", "-t", "all", "-j", job_id, "-o", "%T|%B|%L"]).strip().splitlines()
    except AllocationError as e:
        if "Invalid job id" not in str(e):
            raise
        out = []  # the controller forgot the job (MinJobAge after its end): ask accounting
    if not out:
        return Job(job_id, _accounted_state(job_id), "", None)
    state, host, left = (out[0].split("|") + ["", ""])[:3]
    return Job(job_id, state.strip(), host.strip(), _seconds(left))


def _accounted_state(job_id: str) -> str:
    """A job squeue forgot: its end state from accounting, where there is accounting."""
    try:
        lines = query(["sacct", "-n", "-X", "-P", "-j", job_id, "-o", "State"]).split()
    except AllocationError:
        return "GONE"
    return lines[0].split()[0] if lines else "GONE"


def _seconds(text: str) -> float | None:
    """Slurm's [days-]hours:minutes:seconds (or minutes:seconds)."""
    text = text.strip()
    try:
        days, _, rest = text.rpartition("-")
        parts = [int(x) for x in rest.split(":")]
    except ValueError:
        return None
    while len(parts) < 3:
        parts.insert(0, 0)
    return (int(days or 0) * 24 + parts[0]) * 3600 + parts[1] * 60 + parts[2]


def held_decision(
    cur: Current | None, server: str, status_state, job_now: Job | None, need_s: float, canary: str | None = None
) -> str:
    """``join`` the recorded held stack or ``start`` a new one (pure: unit-tested). A stack that died
    while its job is still live is not restarted by each point: ``fail``; nor one that died in this
    run (``canary``: this run's invocation), its job ended or not: its first point was the canary."""
    died_here = canary is not None and cur is not None and cur.invocation == canary and cur.server == server
    if died_here and cur.job and status_state is State.DEAD:
        return "fail"
    if cur is None or not cur.job or cur.server != server or job_now is None or not job_now.live:
        return "start"
    if status_state is State.DEAD:
        return "fail"
    if status_state is State.STOPPED:
        return "start"
    if job_now.left_s is not None and job_now.state == "RUNNING" and job_now.left_s < need_s:
        return "start"  # too little time left for this point: the old job ends with its own points
    return "join"


class HeldStack:
    """Find or submit the held stack of the plan's server identity; run a point as a step of its job."""

    def __init__(self, plan: Plan, plan_path: Path, result_path: Path, request: HoldRequest, say):
        self.plan, self.plan_path, self.result_path, self.request, self.say = (
            plan, plan_path, result_path, request, say,
        )  # fmt: skip
        self.registry = Registry(stacks_root(plan))
        self.invocation = f"{socket.gethostname()}:{snakemake_ancestor() or os.getpid()}"
        self.submitted = False

    def find_or_submit(self) -> Current:
        lock = self.registry.lock()
        try:
            lock.acquire()
            cur = self.registry.current()
            status = StackDir(cur.dir).status() if cur else None
            now_job = job(cur.job) if cur and cur.job else None
            need = self.plan.resources["point_s"] + 60
            canary = self.invocation if curve_state(self.plan).canary else None
            what = held_decision(cur, self.plan.fingerprints["server"], status and status.state, now_job, need, canary)
            if what == "fail":
                raise HeldFailed(_skipped(cur, status.message))
            if what == "join":
                self.say(f"stack: joining held stack {cur.id} (Slurm job {cur.job}, {now_job.state})")
                if cur.invocation != self.invocation:  # a follow-up run on a lingering stack
                    StackDir(cur.dir).adopt(self.invocation, 0, os.environ.get(HEARTBEAT_ENV))
                return cur
            return self._submit()
        finally:
            lock.close()

    def _submit(self) -> Current:
        server = self.plan.fingerprints["server"]
        stack_id = f"{server[:8]}-{int(time.time() * 1000) % 10**10}-{os.getpid()}"
        d = self.registry.root / stack_id
        d.mkdir(parents=True)
        script = d / "hold.sh"
        script.write_text(HOLD_SCRIPT)
        script.chmod(0o700)
        keeper = [sys.executable, "-m", "servesweep", "keep-stack", str(self.plan_path), "--dir", str(d)]
        keeper += ["--id", stack_id, "--watch", "0", "--expect", str(expected_points(self.plan))]
        keeper += ["--result", str(self.result_path)]
        argv = ["sbatch", "--parsable", f"--job-name=servesweep-stack-{server[:8]}", *self.request.sbatch_options()]
        argv += [f"--output={d / paths.JOB_LOG}", f"--chdir={Path.cwd()}", "--export=ALL", str(script), *keeper]
        try:
            job_id = query(argv).strip().split(";")[0]
        except AllocationError as e:
            raise HeldFailed(f"could not submit the held stack: {e}") from None
        linger = curve_state(self.plan).linger_s
        cur = Current(stack_id, d, 0, self.invocation, server, linger, job_id)
        self.registry.record(cur)
        self.submitted = True
        self.say(
            f"stack: submitted held stack {stack_id} as Slurm job {job_id} ({' '.join(argv[2 : -len(keeper) - 1])})"
        )
        return cur

    def wait_running(self, cur: Current) -> Job:
        """Until the stack's job runs (it may queue for long); its end, or our snakemake's, ends the wait."""
        main = snakemake_ancestor()
        while True:
            j = job(cur.job)
            if j.state == "RUNNING" and j.host:
                return j
            if not j.live:
                raise HeldFailed(self._ended(cur, j))
            if main and not alive(main):
                if self.submitted and j.state == "PENDING":
                    subprocess.run(["scancel", cur.job], capture_output=True, timeout=60)
                raise HeldFailed("the snakemake that wanted this point is gone")
            time.sleep(POLL_S)

    def _ended(self, cur: Current, j: Job) -> str:
        """Why the stack's job ended before this turn ran: its stack's own words where it died."""
        status = StackDir(cur.dir).status()
        if status.state is not State.DEAD:
            return f"the held stack's Slurm job {cur.job} ended ({j.state}) before this point ran"
        if not self.submitted and curve_state(self.plan).canary and cur.invocation == self.invocation:
            return _skipped(cur, status.message)
        return f"the held stack {cur.id} (Slurm job {cur.job}, {j.state}) died: {status.message}"

    def wait_canary(self, cur: Current) -> None:
        """A turn that joined a stack of this run still starting waits for its verdict (the first
        point is the canary): a stack that dies skips it, with the reason."""
        if self.submitted or not curve_state(self.plan).canary:
            return
        sdir, main = StackDir(cur.dir), snakemake_ancestor()
        while True:
            status = sdir.status()
            if status.state is State.DEAD:
                raise HeldFailed(_skipped(cur, status.message))
            if status.state in (State.READY, State.STOPPED) or not job(cur.job).live:
                return  # ready, or its end is the step's to report
            if main and not alive(main):
                raise HeldFailed("the snakemake that wanted this point is gone")
            time.sleep(POLL_S)


def _skipped(cur: Current, message: str | None) -> str:
    return (
        f"skipped: the held stack {cur.id} of these servers (Slurm job {cur.job}) died in this run: "
        f"{message or 'no reason recorded'} (the canary; --config canary=0 lets each point try)"
    )


class HeldFailed(Exception):
    pass


def run_held_point(plan_path: Path, result_path: Path, partition: str | None, account: str | None) -> int:
    plan = private_plan(plan_path)
    if plan is None:
        return 2
    driver, name = ["run-point", str(plan_path), str(result_path)], f"c{plan.concurrency}"
    held = _held_stack(plan, plan_path, result_path, name, partition, account)
    return _run_as_step(held, driver, name, "result.schema.yaml", record=True)


def run_held_check(check: str, plan_path: Path, inputs: Path, out_path: Path, partition, account) -> int:
    """A check (``smoke``, ``eval``) of a recipe whose stack is held: a step of that stack's job, like
    its points (no allocation or engine start of its own)."""
    plan = private_plan(plan_path)
    if plan is None:
        return 2
    driver, name = [f"run-{check}", str(plan_path), str(inputs), str(out_path)], Path(out_path).stem
    held = _held_stack(plan, plan_path, out_path, name, partition, account)
    return _run_as_step(held, driver, name, f"{check}.schema.yaml", record=False)


def _held_stack(plan: Plan, plan_path: Path, out_path: Path, name: str, partition, account) -> HeldStack:
    request = HoldRequest.of(plan, curve_state(plan), partition, account)
    say = Say(f"{plan.recipe} {name}", Path(os.devnull))
    return HeldStack(plan, Path(plan_path).resolve(), Path(out_path).resolve(), request, say)


def _run_as_step(held: HeldStack, driver: list[str], name: str, schema: str, record: bool) -> int:
    """Find or submit the held stack, run ``servesweep <driver> --join`` as a step of its job; its
    exit status. ``record``: a point's failure.json says why the stack ended it."""
    plan, out_path, say = held.plan, held.result_path, held.say
    step: subprocess.Popen | None = None

    def stop_step(signum, _frame):
        if step is not None and step.poll() is None:
            step.send_signal(signal.SIGTERM)  # srun passes it to the step: the driver tears down and records why
            try:
                step.wait(timeout=90)
            except subprocess.TimeoutExpired:
                step.kill()
        raise SystemExit(128 + signum)

    old = {s: signal.signal(s, stop_step) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        cur = held.find_or_submit()
        j = held.wait_running(cur)
        held.wait_canary(cur)
        say(f"stack: {name} runs as a step of Slurm job {cur.job} on {j.host}")
        started = time.time()
        step = subprocess.Popen(_step_argv(cur, j.host, driver, name), start_new_session=True)  # Ctrl-C: stop_step
        rc = step.wait()
    except (HeldFailed, AllocationError) as e:
        say(f"FAILED: {e}")
        if record:
            _add_failure(plan, str(e), fresh=step is None)
        return 1
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    if rc != 0:
        after = _job_or_none(cur.job)
        if after is not None and not after.live:
            if _written(plan, out_path, started, schema):
                say(f"stack: Slurm job {cur.job} ended ({after.state}) as this step exited, after its file was written")
                return 0
            why = f"the held stack's Slurm job {cur.job} ended ({after.state}) while this {name} ran"
            status = StackDir(cur.dir).status()
            why += f": its stack died: {status.message}" if status.state is State.DEAD and status.message else ""
            say(f"FAILED: {why}")
            if record:
                _add_failure(plan, why)
    return rc


def _written(plan: Plan, path: Path, since: float, schema: str) -> bool:
    """Whether this step's driver wrote its file (it does so last, atomically, and only for a valid
    run): the stack's keeper may end the job once the last expected turn has reported, and Slurm then
    cancels that step while its driver exits."""
    try:
        if path.stat().st_mtime < since:
            return False
    except OSError:
        return False
    doc, _ = checked_json(path, schema)
    return isinstance(doc, dict) and doc["identity"]["plan_fingerprint"] == plan.fingerprints["plan"]


def _step_argv(cur: Current, host: str, driver: list[str], name: str) -> list[str]:
    step = ["srun", f"--jobid={cur.job}", "--overlap", "--nodes=1", "--ntasks=1", f"--nodelist={host}"]
    step += ["--kill-on-bad-exit=1", f"--job-name=servesweep-{name}", "--export=ALL"]
    return [*step, sys.executable, "-m", "servesweep", *driver, "--join", str(cur.dir)]


def _job_or_none(job_id: str) -> Job | None:
    """The job's state once it has settled (COMPLETING turns into its end state within seconds)."""
    deadline = time.monotonic() + 30
    try:
        j = job(job_id)
        while j.state == "COMPLETING" and time.monotonic() < deadline:
            time.sleep(POLL_S)
            j = job(job_id)
        return j
    except AllocationError:
        return None


def _add_failure(plan: Plan, reason: str, fresh: bool = False) -> None:
    """The point's failure.json with the held stack's reason first (the step's own, if it wrote one,
    after). ``fresh``: no step ran, so the run dir is an earlier attempt's: it moves aside first."""
    run_dir = default_log_dir(plan)
    if fresh:
        keep_earlier_attempt(run_dir)
    path = run_dir / paths.FAILURE_FILE
    try:
        earlier = json.loads(path.read_text()).get("reason")
    except (OSError, ValueError, AttributeError):
        earlier = None
    if isinstance(earlier, str) and reason in earlier:
        return
    run_dir.mkdir(parents=True, exist_ok=True)
    full = reason + (f" ({earlier})" if isinstance(earlier, str) and earlier else "")
    doc = {"time": now(), "reason": plain_text(full), "logs": str(run_dir)}
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc, indent=1) + "\n")
    tmp.replace(path)

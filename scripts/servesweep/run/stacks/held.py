"""A held stack: on Slurm, the stack of one server identity as a Slurm job of its own (``sbatch``:
the stack keeper as its batch script, sized from the curve file), started by the first point that
needs it and found in the registry (``current.json``) by the next ones, also by a follow-up
snakemake while it lingers. Its points, probes and checks run their drivers as steps of that job
(``stacks/held_step``), so a point's failure ends no other point and a capacity search's probes, decided
one after another, start the engines once. The job ends when the keeper does: its points are done
(and its linger is over), it was idle too long, or the snakemake it serves is gone (heartbeat).
"""

from __future__ import annotations

import math
import os
import socket
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from ...contract import paths
from ...contract.heartbeat import ENV as HEARTBEAT_ENV
from ...contract.plan import CurveHint, Plan, batch_step_tasks, sbatch_args, slurm_resources
from ..slurm import AllocationError, query
from ..slurmjob import POLL_S, Job, job, restarts
from .common import curve_state, keeper_argv, new_stack_dir, snakemake_ancestor, stacks_root
from .decide import Seen, join_start_or_fail
from .registry import Current, Flock, Registry, StackDir, State, alive

TURN_POLL_S = 0.5  # a waiting point looking for its turn (a local lock and a folder, no Slurm query)
TURN_SETTLE_S = 5.0  # points started together (one snakemake scheduling pass) all line up before the first turn
HOLD_MARGIN_S = 300  # over the estimate: teardown, and snakemake re-evaluating between points
HOLD_SCRIPT = '#!/bin/sh\n# a held stack: the keeper is this job\'s batch script (run/stacks/held.py)\nexec "$@"\n'


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
    runtime_min: int
    partition: str | None = None
    account: str | None = None

    @classmethod
    def of(cls, plan: Plan, hint: CurveHint, partition: str | None, account: str | None) -> HoldRequest:
        res = batch_step_tasks(plan.resources)
        points_s = hint.points_s or hint.expected * res["point_s"]
        minutes = math.ceil((res["startup_s"] + points_s + hint.linger_s + HOLD_MARGIN_S) / 60)
        shape = {k: res[k] for k in ("nodes", "tasks", "gpus_per_node", "exclusive", "cpus_per_task", "mem_mb")}
        return cls(**shape, runtime_min=minutes, partition=partition, account=account)

    def sbatch_options(self) -> list[str]:
        out = sbatch_args(slurm_resources(asdict(self)))
        out += [f"--partition={self.partition}"] if self.partition else []
        return out + ([f"--account={self.account}"] if self.account else [])


def held_seen(state: State | None, job_now: Job | None, need_s: float) -> Seen:
    """What a point sees of a held stack (pure: unit-tested): its Slurm job stands for its keeper, and
    a running job's time left must cover ``need_s`` (the point and a margin)."""
    live = job_now is not None and job_now.live
    short = live and job_now.left_s is not None and job_now.state == "RUNNING" and job_now.left_s < need_s
    return Seen(state, live, room=not short, held=True)


class HeldStack:
    """Find or submit the held stack of the plan's server identity; run a point as a step of its job."""

    def __init__(self, plan: Plan, plan_path: Path, result_path: Path, request: HoldRequest, say):
        self.plan, self.plan_path, self.result_path, self.request, self.say = (
            plan, plan_path, result_path, request, say,
        )  # fmt: skip
        self.registry = Registry(stacks_root(plan))
        self.invocation = f"{socket.gethostname()}:{snakemake_ancestor() or os.getpid()}"
        self.submitted = False

    def find_or_submit(self, fresh: bool = False) -> Current:
        """The stack to run on (``fresh``: a new one, after an infrastructure end cut a step short)."""
        lock = self.registry.lock()
        try:
            lock.acquire()
            if fresh:
                return self._submit()
            cur = self.registry.current()
            status = StackDir(cur.dir).status() if cur else None
            now_job = job(cur.job) if cur and cur.job else None
            need = self.plan.resources["point_s"] + 60
            canary = self.invocation if curve_state(self.plan).canary else None  # its first point is the canary
            seen = held_seen(status and status.state, now_job, need)
            what = join_start_or_fail(cur, self.plan.fingerprints["server"], canary, seen)
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
        d = new_stack_dir(self.registry.root, server)
        stack_id = d.name
        script = d / paths.HOLD_SCRIPT
        script.write_text(HOLD_SCRIPT)
        script.chmod(0o700)
        keeper = keeper_argv(self.plan, self.plan_path, d, 0, self.result_path)
        # --requeue: a node failure or preemption runs the stack again (its keeper starts it afresh)
        argv = ["sbatch", "--parsable", "--requeue", "--open-mode=append", f"--job-name=servesweep-stack-{server[:8]}"]
        argv += self.request.sbatch_options()
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
            if main and not alive(main) and self.submitted and j.state == "PENDING":
                subprocess.run(["scancel", cur.job], capture_output=True, timeout=60)
            _require_alive(main)
            time.sleep(POLL_S)

    def _ended(self, cur: Current, j: Job) -> str:
        """Why the stack's job ended before this turn ran: its stack's own words where it died."""
        status = StackDir(cur.dir).status()
        if status.state is not State.DEAD:
            return f"the held stack's Slurm job {cur.job} ended ({j.state}) before this point ran"
        if not self.submitted and curve_state(self.plan).canary and cur.invocation == self.invocation:
            return _skipped(cur, status.message)
        return f"the held stack {cur.id} (Slurm job {cur.job}, {j.state}) died: {status.message}"

    def wait_turn(self, client: Flock, order: str) -> None:
        """Until it is this point's turn to run a step from this host: the lowest ``order`` of the
        stack's points waiting here (its recipes by name, each in ascending concurrency, checks last)
        and no step running. One srun client and one waiting driver per stack, however many points
        wait (they sleep here, polling a lock)."""
        main = snakemake_ancestor()
        queue = self.registry.root / paths.CLIENT_QUEUE / socket.gethostname()
        queue.mkdir(parents=True, exist_ok=True)
        ticket = queue / f"{order}+{os.getpid()}"
        ticket.touch()
        lined_up = time.monotonic() + TURN_SETTLE_S  # the points snakemake started with this one are in line
        try:
            while not (
                time.monotonic() >= lined_up and _first_alive(queue) == ticket.name and client.acquire(blocking=False)
            ):
                _require_alive(main)
                time.sleep(TURN_POLL_S)
        finally:
            ticket.unlink(missing_ok=True)

    def wait_incarnation(self, cur: Current) -> int | None:
        """The job's restart count, once the stack dir is its keeper's of that run (a requeued job's
        keeper starts the stack again: until then the dir holds the cut run's end)."""
        main, sdir = snakemake_ancestor(), StackDir(cur.dir)
        while True:
            n = restarts(cur.job)
            if not n or sdir.status().incarnation >= n:
                return n
            j = job(cur.job)
            if not j.live:
                raise HeldFailed(self._ended(cur, j))
            _require_alive(main)
            time.sleep(POLL_S)

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
            _require_alive(main)
            time.sleep(POLL_S)


def _require_alive(main: int | None) -> None:
    """A waiting point ends when the snakemake that wanted it is gone."""
    if main and not alive(main):
        raise HeldFailed("the snakemake that wanted this point is gone")


def _first_alive(queue: Path) -> str | None:
    """The lowest ticket of a live waiting point (a killed point's ticket is dropped)."""
    names = []
    for f in queue.iterdir():
        pid = f.name.rpartition("+")[2]
        if pid.isdigit() and alive(int(pid)):
            names.append(f.name)
        else:
            f.unlink(missing_ok=True)
    return min(names, default=None)


def _skipped(cur: Current, message: str | None) -> str:
    return (
        f"skipped: the held stack {cur.id} of these servers (Slurm job {cur.job}) died in this run: "
        f"{message or 'no reason recorded'} (the canary; --config canary=0 lets each point try)"
    )


class HeldFailed(Exception):
    pass

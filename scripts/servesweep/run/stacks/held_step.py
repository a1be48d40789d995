"""run-held-point (and run-held-check): a point (a check) on a held stack, from the main snakemake's
host (the stack itself: ``stacks/held``). Each point of a stack waits for the stack's client turn (one
srun client per stack), finds or submits the stack's job, and runs its driver as a step of it; a
step its allocation's end cut short (a requeue, a time limit, a node failure) runs again, a bounded
number of times, each attempt kept."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from ...contract import paths
from ...contract.plan import Plan
from ...fileio.yamlio import checked_json
from .. import client_cpu
from ..attempts import keep_earlier_attempt, record_failure
from ..driver import default_log_dir
from ..driver_io import Say, private_plan
from ..slurm import AllocationError, srun_step
from ..slurmjob import infrastructure_end, job, restarts, settled
from .common import curve_state
from .held import HeldFailed, HeldStack, HoldRequest
from .registry import Current, StackDir, State


def run_held_point(plan_path: Path, result_path: Path, partition: str | None, account: str | None) -> int:
    plan = private_plan(plan_path)
    if plan is None:
        return 2
    driver, name = ["run-point", str(plan_path), str(result_path)], f"c{plan.concurrency}"
    held = _held_stack(plan, plan_path, result_path, name, partition, account)
    order = f"0+{plan.recipe}+{plan.concurrency:09d}"  # a stack's points in ascending concurrency
    return _run_as_step(held, driver, (name, order), paths.RESULT_SCHEMA_FILE, record=True)


def run_held_check(check: str, plan_path: Path, inputs: Path, out_path: Path, partition, account) -> int:
    """A check (``smoke``, ``eval``, ``profile``) of a recipe whose stack is held: a step of that stack's
    job, like its points (no allocation or engine start of its own). A profile's target is a folder:
    its index is the file the step writes last."""
    plan = private_plan(plan_path)
    if plan is None:
        return 2
    driver, name = [f"run-{check}", str(plan_path), str(inputs), str(out_path)], Path(out_path).stem
    written = Path(out_path) / paths.PROFILE_INDEX if check == "profile" else Path(out_path)
    held = _held_stack(plan, plan_path, written, name, partition, account)
    return _run_as_step(held, driver, (name, f"1+{plan.recipe}+{name}"), f"{check}.schema.yaml", record=False)


def _held_stack(plan: Plan, plan_path: Path, out_path: Path, name: str, partition, account) -> HeldStack:
    request = HoldRequest.of(plan, curve_state(plan), partition, account)
    say = Say(f"{plan.recipe} {name}", Path(os.devnull))
    return HeldStack(plan, Path(plan_path).resolve(), Path(out_path).resolve(), request, say)


INFRA_RETRIES = 1  # a point's step cut by its allocation's end (requeue, time limit, node failure): once more


def _run_as_step(held: HeldStack, driver: list[str], turn: tuple[str, str], schema: str, record: bool) -> int:
    """Wait for the stack's client turn (one step at a time per stack from this host), find or submit
    the held stack and run ``servesweep <driver> --join`` as a step of its job; its exit status. A
    step its allocation's end cut short is run again, up to INFRA_RETRIES times, every attempt kept.
    ``turn``: (the step's name, its place among the stack's points waiting here); ``record``: a
    point's failure.json says why the stack ended it."""
    name, order = turn
    step = Step(held, driver, name, record)
    old = {s: signal.signal(s, step.stop) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    client = held.registry.client_lock()
    try:
        held.wait_turn(client, order)
        cur, retries = held.find_or_submit(), INFRA_RETRIES
        while True:
            rc, infra = step.run(cur, schema)
            if rc == 0 or infra is None or retries == 0:
                break
            retries -= 1
            held.say(f"FAILED: {infra}; an infrastructure failure: running {name} again")
            cur = _after_infrastructure_end(held, cur, infra, record)
        if rc != 0 and infra and record:
            _add_failure(held.plan, infra)
        return rc
    except (HeldFailed, AllocationError) as e:
        held.say(f"FAILED: {e}")
        if record:
            _add_failure(held.plan, str(e), fresh=step.proc is None)
        return 1
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        client.close()


def _after_infrastructure_end(held: HeldStack, cur: Current, why: str, record: bool) -> Current:
    """The stack to run the cut step on again: its requeued job once the keeper is ready again, or a
    new held stack when the job ended (time limit, node failure). The cut attempt says why."""
    if record:
        _add_failure(held.plan, why)
    return cur if job(cur.job).live else held.find_or_submit(fresh=True)


class Step:
    """The point's driver as a step of the held stack's job (srun from this host)."""

    def __init__(self, held: HeldStack, driver: list[str], name: str, record: bool):
        self.held, self.driver, self.name, self.record = held, driver, name, record
        self.proc: subprocess.Popen | None = None

    def stop(self, signum, _frame):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)  # srun passes it to the step: the driver tears down and records why
            try:
                self.proc.wait(timeout=90)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        raise SystemExit(128 + signum)

    def run(self, cur: Current, schema: str) -> tuple[int, str | None]:
        """(exit status, why the allocation's end cut it: None for a success or the point's own failure)."""
        held, plan = self.held, self.held.plan
        j = held.wait_running(cur)
        before = held.wait_incarnation(cur)
        held.wait_canary(cur)
        held.say(f"stack: {self.name} runs as a step of Slurm job {cur.job} on {j.host}")
        started = time.time()
        argv = _step_argv(cur, j.host, self.driver, self.name, client_cpu.planned_cores(plan))  # the client's cores
        self.proc = subprocess.Popen(argv, start_new_session=True)
        rc = self.proc.wait()
        if rc == 0:
            return 0, None
        if _written(plan, held.result_path, started, schema):  # the controller may still say RUNNING
            held.say(f"stack: Slurm job {cur.job} ended as this step exited (status {rc}), its file written")
            return 0, None
        after = settled(cur.job)
        if after is None:
            return rc, None
        end = infrastructure_end(after, before, restarts(cur.job) if after.live else None)
        if after.live:
            why = f"the held stack's Slurm job {cur.job} was requeued while this {self.name} ran"
            return rc, why if end else None
        why = f"the held stack's Slurm job {cur.job} ended ({after.state}) while this {self.name} ran"
        status = StackDir(cur.dir).status()
        why += f": its stack died: {status.message}" if status.state is State.DEAD and status.message else ""
        if end:
            return rc, why
        # the stack ended under this step (a scancel): recorded before the next point's turn, so the
        # canary skips the run's later points even when the keeper was killed before it could say so
        StackDir(cur.dir).fail(why)
        held.say(f"FAILED: {why}")
        if self.record:
            _add_failure(plan, why)
        return rc, None


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


def _step_argv(cur: Current, host: str, driver: list[str], name: str, cpus: int | None = None) -> list[str]:
    step = srun_step(host, name, job=cur.job, cpus=cpus)
    return [*step, sys.executable, "-m", "servesweep", *driver, "--join", str(cur.dir)]


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
    record_failure(run_dir, reason + (f" ({earlier})" if isinstance(earlier, str) and earlier else ""))

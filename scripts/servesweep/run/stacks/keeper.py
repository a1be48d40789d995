"""keep-stack: own one curve's warm stack for the points that attach to it (see ``stacks/warm``; a
held stack's keeper is its Slurm job's batch script, ``stacks/held``)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from ...checks.preflight import PreflightFailed
from ...contract import paths
from ...contract.heartbeat import Watch
from ...contract.plan import load_plan
from ..credentials import ControlPlaneAuthError
from ..driver_io import Interrupted, Say, raise_interrupt
from ..ready import PointFailed
from ..slots import PortsBusy
from ..slurm import AllocationError
from ..spawn import MissingSecret
from .common import curve_state
from .decide import stop_reason
from .processes import Stack
from .registry import ProtocolError, Registry, StackDir, State, alive

IDLE_TIMEOUT_S = float(os.environ.get("SERVESWEEP_STACK_IDLE_S", "90"))
WHEN = "mid-curve"  # the phase the keeper's checks name
STARTUP_FAILURES = (PointFailed, MissingSecret, PortsBusy, AllocationError, PreflightFailed, ControlPlaneAuthError)


def keep_stack(plan_path: Path, stack_dir: Path, stack_id: str, watch: int, expect: int, result: Path) -> int:
    plan = load_plan(plan_path)
    say = Say(f"{plan.recipe} stack {stack_id}", stack_dir / paths.KEEPER_DRIVER_LOG)
    sdir = StackDir(stack_dir)
    restart = int(os.environ.get("SLURM_RESTART_COUNT") or 0)  # a held stack's job Slurm requeued
    try:
        claim = sdir.claim_keeper()
        if restart:
            say(f"Slurm job restarted ({restart}): starting the stack again")
            sdir.reincarnate(restart)
        sdir.publish(State.STARTING, incarnation=restart)
    except ProtocolError as e:
        say(f"FAILED: {e}")
        return 1
    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, raise_interrupt)
    stack = Stack(plan, stack_dir, result, say)
    try:
        orphaned = Watch().stale_at_start()  # a held stack's job may start long after it was asked for
        if orphaned:
            raise PointFailed(orphaned)
        stack.start()
        sdir.publish(State.READY, info=stack.info(stack_id).to_json())
        reason = _watch(stack, sdir, watch, expect)
        say(f"stack done: {reason}")
        return 0
    except STARTUP_FAILURES as e:
        running = sdir.running_point()
        msg = _with_point(str(e), running)
        sdir.fail(msg)
        say(f"FAILED: {msg}")
        return 1
    except Interrupted as e:
        sdir.fail(f"stack keeper interrupted by {e}")
        return 128 + e.signum
    except Exception as e:  # a bug: its points must not wait for a stack that will never be ready
        sdir.fail(f"stack keeper failed: {type(e).__name__}: {e}")
        raise
    finally:
        for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(s, signal.SIG_IGN)
        stack.stop()
        claim.close()


def _with_point(msg: str, running) -> str:
    """The running point named where the phase is (``mid-curve``), else at the end of the first line:
    never after a log tail. ``running``: a point's label, or a number (a point of an older driver)."""
    if not running:
        return msg
    where = f" while point {running if isinstance(running, str) else f'c{running}'} was running"
    if WHEN in msg:
        return msg.replace(WHEN, WHEN + where, 1)
    head, nl, tail = msg.partition("\n")
    return f"{head}{where}{nl}{tail}"


class Owner:
    """The snakemake run the stack serves now: the one that started it, or a follow-up run that
    adopted it while it lingered (``StackDir.adopt``)."""

    def __init__(self, sdir: StackDir, watch: int, expect: int):
        self.sdir, self.watch, self.expect = sdir, watch, expect
        self.beat = Watch()  # on a cluster: the main snakemake, which no pid here reaches
        self.base, self.doc = 0, {}
        self.linger_s = 0.0

    def linger(self, asked: float, adopted: bool) -> float:
        """The linger in force: the longest this run asked for. A follow-up run rewrites the curve file
        before its first point adopts the stack; until then the earlier run's linger holds."""
        self.linger_s = asked if adopted else max(self.linger_s, asked)
        return self.linger_s

    def refresh(self) -> bool:
        """True when another run adopted the stack since the last look."""
        doc = self.sdir.owner()
        if not doc or doc == self.doc:
            return False
        self.doc = doc
        try:
            self.watch, self.base = int(doc.get("watch") or 0), int(doc.get("served_base") or 0)
        except (TypeError, ValueError):
            self.watch, self.base = 0, self.sdir.served()  # not ours: only its heartbeat, if any, counts
        self.beat = Watch(str(doc.get("heartbeat") or ""))
        self.expect = 0  # the adopting run's curve file says what it expects
        return True

    def gone(self) -> str | None:
        if self.watch and not alive(self.watch):
            return "the snakemake process running the points is gone"
        return self.beat.gone()


def _watch(stack: Stack, sdir: StackDir, watch: int, expect: int) -> str:
    """Until the stack is no longer needed; raise PointFailed if one of its processes dies.
    The decision to stop is taken and published under the registry lock, so no point joins a
    stack that is about to stop (it starts a new one instead)."""
    last_busy = time.monotonic()
    owner = Owner(sdir, watch, expect)
    while True:
        stack.check(WHEN)
        registry = Registry(sdir.path.parent).lock()
        try:
            registry.acquire()
            adopted = owner.refresh()
            hint = curve_state(stack.plan)
            busy = bool(sdir.waiting()) or adopted or hint.deciding  # a halving screen's stack waits for its sweep
            last_busy = time.monotonic() if busy else last_busy
            idle = (time.monotonic() - last_busy, IDLE_TIMEOUT_S, owner.linger(hint.linger_s, adopted))
            reason = stop_reason(
                busy, sdir.served() - owner.base, max(owner.expect, hint.expected), hint.searching, idle, owner.gone()
            )
            if reason:
                sdir.publish(State.STOPPED, message=reason)
                return reason
        finally:
            registry.close()
        time.sleep(0.2)

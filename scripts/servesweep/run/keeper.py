"""keep-stack: own one curve's warm stack for the points that attach to it (see ``curve``)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from ..contract import load_plan
from ..preflight import PreflightFailed
from .credentials import ControlPlaneAuthError
from .curve import IDLE_TIMEOUT_S, _alive, _Flock, curve_state, read_json, waiting_points, write_json
from .driver_io import Interrupted, Say, raise_interrupt
from .ready import PointFailed
from .slots import PortsBusy
from .slurm import AllocationError
from .spawn import MissingSecret
from .stack import Stack

STARTUP_FAILURES = (PointFailed, MissingSecret, PortsBusy, AllocationError, PreflightFailed, ControlPlaneAuthError)


def keep_stack(plan_path: Path, stack_dir: Path, stack_id: str, watch: int, expect: int, result: Path) -> int:
    plan = load_plan(plan_path)
    say = Say(f"{plan.recipe} stack {stack_id}", stack_dir / "keeper-driver.log")
    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, raise_interrupt)
    state = {"state": "starting", "keeper": os.getpid()}
    write_json(stack_dir / "state.json", state)
    stack = Stack(plan, stack_dir, result, say)
    try:
        stack.start()
        write_json(stack_dir / "state.json", {**state, "state": "ready", "info": stack.info(stack_id).to_json()})
        reason = _watch(stack, stack_dir, watch, expect, state)
        say(f"stack done: {reason}")
        return 0
    except STARTUP_FAILURES as e:
        running = read_json(stack_dir / "running.json").get("point")
        where = f" while point c{running} was running" if running else ""
        write_json(stack_dir / "state.json", {**state, "state": "dead", "message": f"{e}{where}"})
        say(f"FAILED: {e}{where}")
        return 1
    except Interrupted as e:
        write_json(stack_dir / "state.json", {**state, "state": "dead", "message": f"stack keeper interrupted by {e}"})
        return 128 + e.signum
    finally:
        for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(s, signal.SIG_IGN)
        stack.stop()


def _watch(stack: Stack, stack_dir: Path, watch: int, expect: int, state: dict) -> str:
    """Until the stack is no longer needed; raise PointFailed if one of its processes dies.
    The decision to stop is taken and published under the registry lock, so no point joins a
    stack that is about to stop (it starts a new one instead)."""
    last_busy = time.monotonic()
    while True:
        stack.check("mid-curve")
        reason = None if _alive(watch) else "the snakemake process running the points is gone"
        registry = _Flock(stack_dir.parent / "registry.lock")
        try:
            registry.acquire()
            busy = waiting_points(stack_dir)
            served = int(read_json(stack_dir / "served.json").get("served", 0))
            expected, searching = curve_state(stack.plan)
            if busy:
                last_busy = time.monotonic()
            elif served >= max(expect, expected) and not searching:
                reason = reason or f"all {served} expected point(s) done"
            elif time.monotonic() - last_busy > IDLE_TIMEOUT_S:
                reason = reason or f"idle for {IDLE_TIMEOUT_S:.0f} s after {served} point(s)"
            if reason:
                write_json(stack_dir / "state.json", {**state, "state": "stopped", "message": reason})
                return reason
        finally:
            registry.close()
        time.sleep(0.2)

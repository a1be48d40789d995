"""What the point driver and the stack keeper share: progress lines and signal handling."""

from __future__ import annotations

import datetime as dt
import signal
import sys
from pathlib import Path

from ..contract.plan import Plan, PlanError, load_plan

ORPHANED = signal.SIGUSR2  # a supervised driver's parent-death signal: its supervisor (run/supervise) is gone
SUPERVISOR: list[int] = []  # in a supervised driver: its supervisor's pid (getppid() changes once it is gone)


def orphaned_by() -> str:
    """What interrupted a driver whose supervisor died: only SIGKILL ends it without a word."""
    pid = SUPERVISOR[0] if SUPERVISOR else "unknown"
    return (
        f"the SIGKILL of its supervisor process (servesweep run-point, pid {pid}): it died without passing on "
        "a signal it could catch"
    )


class Interrupted(BaseException):
    """``str()``: what interrupted ("SIGTERM"; for the driver's parent-death signal, its killed
    supervisor: run/supervise)."""

    def __init__(self, signum: int):
        self.signum = signum
        super().__init__(orphaned_by() if signum == ORPHANED else signal.Signals(signum).name)


INTERRUPTS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, ORPHANED)


def raise_interrupt(signum, _frame):
    """Once: a second signal (Ctrl-C reaches a whole process group, and a supervisor passes its
    own on) must not cut short the teardown and the failure record of the first."""
    for s in INTERRUPTS:
        signal.signal(s, signal.SIG_IGN)
    raise Interrupted(signum)


def point_label(plan: Plan) -> str:
    """A point as its result and logs are named (``c<point>``); a rehearsal that runs a capped
    concurrency says which one it ran."""
    if plan.point == plan.concurrency:
        return f"c{plan.point}"
    return f"c{plan.point} (rehearsed at c{plan.concurrency})"


def now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


class Say:
    """Progress lines to stderr and a log file. Never prints env values."""

    def __init__(self, prefix: str, log_path: Path):
        self.prefix, self.log = prefix, open(log_path, "a", buffering=1)

    def __call__(self, msg: str) -> None:
        line = f"[{self.prefix}] {msg}"
        print(line, file=sys.stderr, flush=True)
        self.log.write(f"{now()} {line}\n")


def private_plan(plan_path: Path) -> Plan | None:
    """A point's plan, read with private outputs from here on; None (the reason said) if it is not one."""
    from ..fileio.files import private_outputs

    private_outputs()
    try:
        return load_plan(plan_path)
    except PlanError as e:
        print(f"servesweep: {e}", file=sys.stderr)
        return None

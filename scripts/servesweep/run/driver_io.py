"""What the point driver and the stack keeper share: progress lines and signal handling."""

from __future__ import annotations

import datetime as dt
import signal
import sys
from pathlib import Path

from ..contract.plan import Plan, PlanError, load_plan


class Interrupted(BaseException):
    def __init__(self, signum: int):
        self.signum = signum
        super().__init__(signal.Signals(signum).name)


INTERRUPTS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR2)


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

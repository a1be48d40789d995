"""One engine start per server identity: the points that run in one snakemake invocation and
allocation, of every recipe with the same servers (``fingerprints.server``), share a warm stack.

The first of them to run starts a *keeper* (``servesweep keep-stack``), a detached
process that owns the stack: it starts it, watches every process, and tears it down when
the expected points are done, when it has been idle, or when the snakemake process that
runs the points is gone (Ctrl-C, SIGKILL, scancel, time limit). Each point attaches, waits
its turn (one benchmark at a time), runs aiperf against the stack and writes its own
result. The stack directory's files, states and transitions are ``stacks/registry``'s, the
decisions ``stacks/decide``'s; what this shares with a held stack, ``stacks/common``'s.
"""

from __future__ import annotations

import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from ...contract import paths
from ...contract.plan import Plan
from ..driver_io import point_label
from ..metrics import http_post_json
from ..ready import PointFailed
from .common import curve_state, keeper_argv, new_stack_dir, snakemake_ancestor, stacks_root
from .decide import Seen, join_start_or_fail
from .processes import StackInfo
from .registry import Current, Flock, Registry, StackDir, State, Status, alive


@dataclass(frozen=True)
class Invocation:
    """Points share a stack only within one snakemake process and one allocation."""

    snakemake_pid: int
    job_id: str

    @property
    def key(self) -> str:
        return f"{self.job_id}:{self.snakemake_pid}"

    @classmethod
    def current(cls) -> Invocation | None:
        pid = snakemake_ancestor()
        return cls(pid, os.environ.get("SLURM_JOB_ID", "local")) if pid else None


class SharedStack:
    """A point's view of the curve's warm stack: attach, take the turn, check health, detach."""

    def __init__(self, plan: Plan, plan_path: Path, result_path: Path, inv: Invocation | None, say, join=None):
        """``join``: the directory of a held stack to join (this point runs as a step of its job)."""
        self.plan, self.plan_path, self.inv, self.say = plan, plan_path, inv, say
        self.result_path, self.join = result_path, join
        self.registry = Registry(stacks_root(plan))
        self.dir: Path | None = None
        self.stack: StackDir | None = None
        self.info: StackInfo | None = None
        self.position = 0
        self.linger_s = 0.0  # how long the stack stays up after this run's last point (the curve file)
        self._turn: Flock | None = None

    def attach(self) -> None:
        registry = self.registry.lock()
        try:
            registry.acquire()
            self.dir = self._find_or_start()
            self.stack = StackDir(self.dir)
            self.stack.wait(os.getpid())  # the keeper stops for no one still waiting
        finally:
            registry.close()
        self.info = self._wait_ready()
        self._take_turn()

    def _find_or_start(self) -> Path:
        if self.join is not None:
            return self._join_held(Path(self.join))
        cur = self.registry.current()
        status = StackDir(cur.dir).status() if cur else Status(None)
        seen = Seen(status.state, cur is not None and alive(cur.keeper))
        what = join_start_or_fail(cur, self.plan.fingerprints["server"], self.inv.key, seen)
        if what == "fail":  # the stack died: the points that wanted it fail at once
            raise PointFailed(f"the stack {cur.id} died: {status.message}")
        if what == "join":
            self.say(f"stack: joining warm stack {cur.id}")
            if cur.invocation != self.inv.key:  # a follow-up run on a lingering stack
                StackDir(cur.dir).adopt(self.inv.key, self.inv.snakemake_pid, None)
            return cur.dir
        return self._start_keeper()

    def _join_held(self, d: Path) -> Path:
        st = StackDir(d).status()
        if st.state in (State.DEAD, State.STOPPED):
            raise PointFailed(f"the held stack {d.name} is {st.state.value}: {st.message}")
        self.say(f"stack: joining held stack {d.name}")
        return d

    def _start_keeper(self) -> Path:
        d = new_stack_dir(self.registry.root, self.plan.fingerprints["server"])
        stack_id = d.name
        argv = keeper_argv(self.plan, self.plan_path, d, self.inv.snakemake_pid, self.result_path)
        with open(d / paths.KEEPER_LOG, "ab") as log:
            keeper = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True, close_fds=True, cwd=Path.cwd(),
            )  # fmt: skip
        linger = curve_state(self.plan).linger_s
        self.registry.record(Current(stack_id, d, keeper.pid, self.inv.key, self.plan.fingerprints["server"], linger))
        server = self.plan.fingerprints["server"]
        self.say(f"stack: starting stack {stack_id} for server {server} (keeper pid {keeper.pid}, logs {d})")
        return d

    def _wait_ready(self) -> StackInfo:
        deadline = time.monotonic() + self.plan.readiness["timeout_s"] + 60
        keeper = self._keeper()
        while time.monotonic() < deadline:
            st = self.stack.status()
            if st.state is State.READY:
                info = StackInfo(**st.info)
                log = self.dir / paths.KEEPER_DRIVER_LOG
                self.say(f"ready: stack {info.id} up in {info.startup_s:.1f} s (log {log})")
                return info
            if st.state in (State.DEAD, State.STOPPED):
                raise PointFailed(f"stack {self.dir.name}: {st.message}")
            if st.state is None and keeper and not alive(keeper) and self.stack.status().state is None:
                raise PointFailed(f"stack keeper exited before starting; see {self.dir / paths.KEEPER_LOG}")
            time.sleep(0.1)
        raise PointFailed(f"stack {self.dir.name} not ready in time; see {self.dir}")

    def _keeper(self) -> int | None:
        """The keeper's pid on this host (it writes it into the state; a held stack's keeper runs on
        the node this point's step runs on)."""
        st = self.stack.status()
        if st.keeper:
            return st.keeper
        cur = self.registry.current()
        return cur.keeper if cur and cur.dir == self.dir else None

    def _take_turn(self) -> None:
        """One benchmark at a time on a stack; a dead stack ends the wait."""
        self._turn = self.stack.turn_lock()
        while not self._turn.acquire(blocking=False):
            self.check("while waiting for its turn")
            time.sleep(0.1)
        self.check("before its benchmark")
        self.position = self.stack.start_turn(point_label(self.plan), time.time())  # as its messages name it
        self.linger_s = curve_state(self.plan).linger_s
        self.say(f"stack: point {self.position} on stack {self.dir.name} (started in {self.info.startup_s:.1f} s)")

    def check(self, when: str) -> None:
        st = self.stack.status()
        if st.state is not State.READY:
            state = st.state.value if st.state else "not started"
            raise PointFailed(f"stack {self.dir.name} is {state} {when}: {st.message}")

    def detach(self, counted: bool = True) -> None:
        """``counted``: the turn served a point (a turn cut by a signal is not: after a requeue of a
        held stack's job its point runs again, and the keeper must wait for it)."""
        last = False
        if self._turn is not None:
            served = self.stack.finish_turn(counted)
            self._turn.close()
            self._turn = None
            hint = curve_state(self.plan)
            last = served >= hint.expected and not (hint.searching or hint.deciding or hint.linger_s)
        if self.stack is not None:
            self.stack.done_waiting(os.getpid())
            if last and not self.stack.waiting():
                self._wait_for_teardown()

    def _wait_for_teardown(self) -> None:
        """The curve's last point returns only once its stack is gone: when snakemake returns,
        nothing it started is still running (the keeper stops after the expected points)."""
        keeper = self._keeper()
        grace = float(os.environ.get("SERVESWEEP_GRACE_S", "5"))
        deadline = time.monotonic() + 4 * grace + 30
        while alive(keeper) and time.monotonic() < deadline:
            if self.stack.waiting():  # another point joined after all: the stack stays for it
                return
            time.sleep(0.1)
        if alive(keeper):
            self.say(f"stack: keeper {keeper} still running {4 * grace + 30:.0f} s after the last point")
        else:
            self.say(f"stack: {self.dir.name} torn down")


def reset_prefix_caches(plan: Plan, ctx, position: int) -> tuple[bool | None, str]:
    """Before a point on a warm stack: reset prefix caches where the engine can; say what happened."""
    if position == 1:
        return False, "first point on a fresh stack: nothing cached yet"
    reset = plan.stack.get("prefix_reset")
    if reset is None:
        return None, f"{plan.engine} has no prefix-cache reset endpoint here: earlier points of this stack warmed it"
    if not reset["enabled"]:
        why = f"reset not enabled (stack.reset_prefix_cache: {reset['opt_in']})"
        return None, f"{why}: earlier points of this stack warmed it"
    url = f"http://{{addr:self}}:{{port:self.{reset['port']}}}{reset['path']}"
    codes = [http_post_json(ctx.url(url, p.name), {})[0] for p in plan.processes if p.is_engine and not p.headless]
    if codes and all(code == 200 for code in codes):
        return True, f"POST {reset['path']} on every engine"
    return None, f"{plan.engine} refused {reset['path']} (HTTP {codes}); it needs {reset['opt_in']}"

"""Watching a stack's processes through the benchmark window for a stop or a silence, not only an exit.

A process that is stopped (SIGSTOP, a debugger, a frozen cgroup) or whose health endpoint no longer
answers is alive to ``poll()``, yet serves nothing: aiperf waits on it and the point would fail only
after duration + grace, blamed on something else. Each process is looked at two ways: its process
state (the whole tree under the pid we started) and its health endpoint, probed by a thread of its
own with a deadline so a silent process never blocks the benchmark loop. A process that stays
stopped or silent past ``STALL_FAIL_S`` fails the point at once, naming it and what was seen; one
that recovers after ``RECORD_AFTER_S`` or more is recorded as a stall of the window (the result's
``stalls``), so its figures are never taken as a steady measurement.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import psutil

from .metrics import http_get
from .ready import STALL_FAIL_S, PointFailed, healthy

RECORD_AFTER_S = 3.0  # a silence this long that recovers is a stall of the window (health answers take < 1 s)
HEALTH_DEADLINE_S = 2.0  # a health answer later than this counts as no answer
PROBE_EVERY_S = 0.5
TREE_EVERY_S = 1.0  # how often the process tree under each pid is re-read
STOPPED = (psutil.STATUS_STOPPED, psutil.STATUS_TRACING_STOP)


@dataclass(frozen=True)
class Watched:
    """One stack process as the watch knows it; ``pid`` None where no local pid stands for it."""

    name: str
    role: str
    index: int
    pid: int | None
    health_url: str | None

    def label(self) -> str:
        return f"{self.name} (role {self.role}, index {self.index}, pid {self.pid or 'not local'})"


def targets(plan, pids: dict, url) -> list[Watched]:
    """The plan's processes with their pids (``pids``: name -> pid) and resolved health URLs
    (``url(template, name)``); ``index`` counts processes of one role in plan order."""
    seen: dict[str, int] = {}
    out = []
    for p in plan.processes:
        seen[p.role] = seen.get(p.role, -1) + 1
        out.append(Watched(p.name, p.role, seen[p.role], pids.get(p.name), url(p.health_url, p.name)))
    return out


class _Prober(threading.Thread):
    """Probes one health endpoint every PROBE_EVERY_S; remembers the last answer and the last failure."""

    def __init__(self, url: str, tls, started: float):
        super().__init__(name="servesweep-health-probe", daemon=True)
        self.url, self.tls = url, tls
        self.halt = threading.Event()
        self.lock = threading.Lock()
        self.answered_at, self.failure = started, ""

    def run(self) -> None:
        while not self.halt.is_set():
            ok, seen = probe(self.url, self.tls)
            with self.lock:
                if ok:
                    self.answered_at, self.failure = time.monotonic(), ""
                else:
                    self.failure = seen
            self.halt.wait(PROBE_EVERY_S)

    def silence(self, now: float) -> tuple[float, str] | None:
        """(since when, what was seen) while the endpoint has not answered for HEALTH_DEADLINE_S."""
        with self.lock:
            if now - self.answered_at < HEALTH_DEADLINE_S:
                return None
            pending = f"a probe pending for over {HEALTH_DEADLINE_S:g} s"
            return self.answered_at, f"its health endpoint {self.url} did not answer ({self.failure or pending})"


def probe(url: str, tls) -> tuple[bool, str]:
    """(answered, what was seen). Any HTTP answer counts: the process is running and serving."""
    if url.startswith("nats://"):
        return (True, "") if healthy(url, tls) else (False, f"no INFO greeting within {HEALTH_DEADLINE_S:g} s")
    status, body = http_get(url, timeout=HEALTH_DEADLINE_S, tls=tls)
    if status:
        return True, ""
    return False, f"no answer within {HEALTH_DEADLINE_S:g} s: {body[:120]}"


def stopped_in(tree: list[psutil.Process]) -> str | None:
    """What is stopped in a process tree (the root or a child), or None."""
    for p in tree:
        try:
            status = p.status()
        except psutil.Error:
            continue
        if status in STOPPED:
            return f"its process {p.pid} is stopped (state {status}: SIGSTOP, a debugger or a frozen cgroup)"
    return None


class StackWatch:
    """Start with the benchmark; call :meth:`look` from its loop; :meth:`stop` returns the stalls."""

    def __init__(self, watched: list[Watched], tls=None, clock=time.monotonic):
        self.clock, self.t0 = clock, clock()
        self.watched = watched
        self.probers = {w.name: _Prober(w.health_url, tls, self.t0) for w in watched if w.health_url}
        for p in self.probers.values():
            p.start()
        self.trees: dict[str, list[psutil.Process]] = {}
        self.trees_at = -TREE_EVERY_S
        self.open: dict[str, tuple[float, str]] = {}  # process -> (since, what was seen), while it lasts
        self.stalls: list[dict] = []

    def look(self, when: str) -> None:
        """Raise PointFailed for a process stopped or silent past STALL_FAIL_S; record recoveries."""
        now = self.clock()
        self._refresh_trees(now)
        for w in self.watched:
            symptom = self._symptom(w, now)
            if symptom is None:
                self._recovered(w, now)
                continue
            since, seen = self.open.setdefault(w.name, symptom)
            if now - since >= STALL_FAIL_S:
                raise PointFailed(
                    f"{w.label()} has served nothing for {now - since:.0f} s {when} (the bound is "
                    f"{STALL_FAIL_S:g} s): {seen}"
                )

    def explain(self, e: PointFailed) -> PointFailed:
        """``e`` (a lapsed registration, say) with the processes stopped or silent right now: the
        cause is named even when its consequence is seen first."""
        now = self.clock()
        seen = [
            f"{w.label()} for {now - self.open[w.name][0]:.0f} s: {self.open[w.name][1]}"
            for w in self.watched
            if w.name in self.open and w.label() not in str(e)
        ]
        if not seen:
            return e
        head, nl, tail = str(e).partition("\n")
        return PointFailed(f"{head}; seen meanwhile: {'; '.join(seen)}{nl}{tail}")

    def _symptom(self, w: Watched, now: float) -> tuple[float, str] | None:
        stopped = stopped_in(self.trees.get(w.name, []))
        if stopped:
            return now, stopped
        prober = self.probers.get(w.name)
        return prober.silence(now) if prober else None

    def _recovered(self, w: Watched, now: float) -> None:
        since, seen = self.open.pop(w.name, (None, ""))
        if since is not None:
            self._record(w.name, since, now, seen)

    def _record(self, name: str, since: float, now: float, seen: str) -> None:
        if now - since >= RECORD_AFTER_S:
            start, seconds = round(since - self.t0, 1), round(now - since, 1)
            self.stalls.append({"process": name, "start_s": start, "seconds": seconds, "seen": seen})

    def _refresh_trees(self, now: float) -> None:
        if now - self.trees_at < TREE_EVERY_S:
            return
        self.trees_at = now
        for w in self.watched:
            if w.pid:
                self.trees[w.name] = _tree(w.pid, self.trees.get(w.name))

    def stop(self) -> list[dict]:
        """End the watch; the stalls seen, a stall still open at the end included."""
        now = self.clock()
        for name, (since, seen) in self.open.items():
            self._record(name, since, now, seen)
        self.open.clear()
        for p in self.probers.values():
            p.halt.set()
        return list(self.stalls)


def _tree(pid: int, known: list[psutil.Process] | None) -> list[psutil.Process]:
    """The process and its descendants (psutil objects guard against a reused pid)."""
    try:
        root = known[0] if known and known[0].is_running() else psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.Error:
        return []

"""The warm-stack registry and state machine: a stack directory's files, its states and the legal
transitions between them, and ``current.json``, the stack a server identity's next point joins.

The stacks of one server identity live under ``logs/stacks/<server>/`` (``paths.stacks_dir``), shared
by every recipe with those servers: ``current.json`` names
the stack a new point should join, ``registry.lock`` serializes joining against stopping. In each
stack's own directory: ``state.json`` (the keeper's), ``served.json`` and ``running.json`` (the
points'), ``waiting/<pid>`` (points attached and not done), ``turn.lock`` (one benchmark at a time),
``keeper.lock`` (one keeper per stack), ``owner.json`` (the snakemake run a lingering stack serves
now: a follow-up run adopts it). Written and read by the run side only (this package); render and
workflow never read it. The decisions taken from them are ``stacks/decide``'s.
"""

from __future__ import annotations

import fcntl
import json
import os
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

import psutil

from ...contract import paths
from ...contract.paths import CURRENT_FILE, STATE_FILE
from ...fileio.files import read_json_object as read_json
from ...fileio.files import write_if_changed


class State(StrEnum):
    STARTING = "starting"
    READY = "ready"
    STOPPED = "stopped"  # torn down (or about to be) because no point needs it
    DEAD = "dead"  # a process died, startup failed or the keeper was interrupted


TRANSITIONS = {
    None: {State.STARTING},
    State.STARTING: {State.READY, State.DEAD},
    State.READY: {State.STOPPED, State.DEAD},
    State.STOPPED: set(),
    State.DEAD: set(),
}


@dataclass(frozen=True)
class Current:
    """``current.json``: the stack a new point of the curve should join, and who keeps it."""

    id: str
    dir: Path
    keeper: int  # its pid on this host (0: a held stack, whose keeper runs in a Slurm job of its own)
    invocation: str  # the snakemake run (and its parent) that started it
    server: str  # the server identity of the plans it serves (fingerprints.server)
    linger_s: float = 0.0  # it stays up this long after its last point: another run may join it
    job: str = ""  # a held stack: its own Slurm job

    def to_json(self) -> dict:
        return {**self.__dict__, "dir": str(self.dir)}


class ProtocolError(Exception):
    """A transition the protocol does not allow (a second keeper, a state after the end)."""


def alive(pid: int | None) -> bool:
    try:
        return bool(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def write_json(path: Path, doc: dict) -> None:
    write_if_changed(path, json.dumps(doc, indent=1, sort_keys=True) + "\n")


class Flock:
    def __init__(self, path: Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        self.fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o600)

    def acquire(self, blocking: bool = True) -> bool:
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
            return True
        except BlockingIOError:
            return False

    def close(self) -> None:
        os.close(self.fd)


@dataclass(frozen=True)
class Status:
    state: State | None  # None: the keeper has written nothing yet
    message: str | None = None
    info: dict | None = None
    keeper: int | None = None
    incarnation: int = 0  # the Slurm restart of the held job whose keeper wrote it (0: its first run)


@dataclass(frozen=True)
class StackDir:
    path: Path

    @property
    def id(self) -> str:
        return self.path.name

    def status(self) -> Status:
        doc = read_json(self.path / STATE_FILE)
        try:
            state = State(doc["state"]) if "state" in doc else None
        except ValueError:
            state = State.DEAD  # an unknown state is never joined
        restart = doc.get("incarnation", 0)
        restart = restart if isinstance(restart, int) and not isinstance(restart, bool) else -1
        return Status(state, doc.get("message"), doc.get("info"), doc.get("keeper"), restart)

    def publish(self, state: State, **fields) -> None:
        """The keeper's next state; only the transitions the protocol allows."""
        status = self.status()
        if state not in TRANSITIONS[status.state]:
            now = status.state and status.state.value
            raise ProtocolError(f"stack {self.id}: {now} -> {state.value} is not allowed")
        fields.setdefault("incarnation", max(status.incarnation, 0))
        write_json(self.path / STATE_FILE, {"state": state.value, "keeper": os.getpid(), **fields})

    def reincarnate(self, restart: int) -> None:
        """The keeper of a held stack whose Slurm job was requeued (its ``restart``-th run) starts the
        stack afresh: what the cut run left (state, process logs, credentials, etcd data) moves into
        ``before-restart-<n>``, and the protocol begins again; the points served stay counted."""
        aside = self.path / paths.earlier_run_dir(restart)
        aside.mkdir(exist_ok=True)
        for f in self.path.iterdir():
            if f.name not in paths.KEPT_ACROSS_RESTARTS and not f.name.startswith(paths.EARLIER_RUN_PREFIX):
                f.rename(aside / f.name)

    def fail(self, message: str) -> None:
        """DEAD, unless the stack already reached an end state (a stop under way stays a stop)."""
        if self.status().state not in (State.STOPPED, State.DEAD):
            self.publish(State.DEAD, message=message)

    def served(self) -> int:
        return int(read_json(self.path / paths.SERVED_FILE).get("served", 0))

    def finish_turn(self, counted: bool = True) -> int:
        served = self.served() + (1 if counted else 0)
        write_json(self.path / paths.SERVED_FILE, {"served": served})
        (self.path / paths.RUNNING_FILE).unlink(missing_ok=True)
        return served

    def start_turn(self, point: int, since: float) -> int:
        """This point's position on the stack (1 = the first benchmark on it)."""
        write_json(self.path / paths.RUNNING_FILE, {"point": point, "since": since})
        return self.served() + 1

    def owner(self) -> dict:
        """The run that adopted this stack after it started (a follow-up run on a lingering stack):
        {invocation, watch (pid or 0), heartbeat (path or None), served_base}; {} while its starter owns it."""
        return read_json(self.path / paths.OWNER_FILE)

    def adopt(self, invocation: str, watch: int, heartbeat: str | None) -> None:
        """A point of another snakemake run joins: the keeper watches that run from now on and
        counts its points from here."""
        if self.owner().get("invocation") != invocation:
            doc = {"invocation": invocation, "watch": watch, "heartbeat": heartbeat, "served_base": self.served()}
            write_json(self.path / paths.OWNER_FILE, doc)

    def running_point(self) -> int | None:
        return read_json(self.path / paths.RUNNING_FILE).get("point")

    def wait(self, pid: int) -> None:
        (self.path / paths.WAITING_DIR).mkdir(exist_ok=True)
        (self.path / paths.WAITING_DIR / str(pid)).touch()

    def done_waiting(self, pid: int) -> None:
        (self.path / paths.WAITING_DIR / str(pid)).unlink(missing_ok=True)

    def waiting(self) -> list[int]:
        """Points attached and still alive (a killed point does not hold the stack up)."""
        out = []
        for f in (self.path / paths.WAITING_DIR).glob("*"):
            if f.name.isdigit() and alive(int(f.name)):
                out.append(int(f.name))
            else:
                f.unlink(missing_ok=True)
        return out

    def turn_lock(self) -> Flock:
        return Flock(self.path / paths.TURN_LOCK)

    def claim_keeper(self) -> Flock:
        """The one keeper of this stack (held until it exits); a second is refused."""
        lock = Flock(self.path / paths.KEEPER_LOCK)
        if not lock.acquire(blocking=False):
            lock.close()
            raise ProtocolError(f"stack {self.id} already has a keeper")
        return lock


class Registry:
    """The stacks root of one server identity (``paths.stacks_dir``): its ``current.json`` and ``registry.lock``."""

    def __init__(self, root: Path):
        self.root = root

    def lock(self) -> Flock:
        """Held while a point joins or starts a stack (and while a keeper decides to stop)."""
        return Flock(self.root / paths.REGISTRY_LOCK)

    def client_lock(self) -> Flock:
        """Held by the point (a held stack's) whose step runs now from the submitting host."""
        return Flock(self.root / paths.CLIENT_LOCK)

    def current(self) -> Current | None:
        """The recorded stack, or None when there is none or the file is not one we wrote."""
        doc = read_json(self.root / CURRENT_FILE)
        try:
            return Current(
                str(doc["id"]), Path(doc["dir"]), int(doc["keeper"]), str(doc["invocation"]), str(doc["server"]),
                float(doc.get("linger_s", 0)), str(doc.get("job", "")),
            )  # fmt: skip
        except (KeyError, TypeError, ValueError):
            return None

    def record(self, current: Current) -> None:
        write_json(self.root / CURRENT_FILE, current.to_json())

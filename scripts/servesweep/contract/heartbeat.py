"""The main snakemake's heartbeat, for cluster jobs that would otherwise outlive it.

When points run as Slurm jobs, a SIGKILL of the main snakemake (or a login node reboot) leaves its
jobs running, holding GPUs, until their time limit: no parent pid reaches across nodes. The main
process writes a heartbeat file on the shared filesystem every few seconds (a daemon thread, so
it stops with the process, however it ends); the jobs inherit its path through the environment.
A stack keeper stops its stack once the heartbeat has not changed for ``timeout_s`` (read on its
own monotonic clock: no cross-node clock comparison), and a point does not start a stack for a
main process whose last beat is older than that.
"""

from __future__ import annotations

import atexit
import os
import secrets
import threading
import time
from pathlib import Path

from ..fileio.files import write_if_changed
from .paths import HEARTBEAT_DIR

ENV = "SERVESWEEP_HEARTBEAT"  # the heartbeat file of the main process that submitted this job
TIMEOUT_ENV = "SERVESWEEP_HEARTBEAT_TIMEOUT_S"
INTERVAL_S = 5.0
DEFAULT_TIMEOUT_S = 120.0
DIR = HEARTBEAT_DIR
ENDED = "ended"  # the last beat of a main process that exited
KEEP_ENDED_S = 86400  # ended beats older than this are removed when the next main process starts


class Beat:
    """The main process's side: a daemon thread writing ``<count> <time>`` every INTERVAL_S."""

    def __init__(self, root: Path):
        self.path = Path(root).resolve() / DIR / f"{os.getpid()}-{secrets.token_hex(4)}"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._stop = threading.Event()
        self._beat()  # the first beat exists before any job is submitted
        threading.Thread(target=self._run, name="servesweep-heartbeat", daemon=True).start()
        atexit.register(self.stop)

    def _beat(self, n: int = 1) -> None:
        try:
            write_if_changed(self.path, f"{n} {time.time():.3f}\n")
        except OSError:
            pass  # a full or flaky filesystem: the jobs then see no beat and stop, which is safe

    def _run(self) -> None:
        n = 1
        while not self._stop.wait(INTERVAL_S):
            n += 1
            self._beat(n)

    def stop(self) -> None:
        """At exit (also Ctrl-C): the last beat says so, so the jobs stop at once, not a timeout later."""
        self._stop.set()
        try:
            write_if_changed(self.path, f"{ENDED} {time.time():.3f}\n")
        except OSError:
            pass


def start(root: Path) -> Beat:
    """In the main process, before jobs are submitted: beat until the process ends; the jobs
    inherit the file's path through the environment."""
    beat = Beat(root)
    os.environ[ENV] = str(beat.path)
    for old in beat.path.parent.iterdir():
        try:
            if old.read_text().startswith(ENDED) and time.time() - old.stat().st_mtime > KEEP_ENDED_S:
                old.unlink()
        except OSError:
            continue
    return beat


def timeout_s() -> float:
    try:
        return max(float(os.environ.get(TIMEOUT_ENV, DEFAULT_TIMEOUT_S)), 3 * INTERVAL_S)
    except ValueError:
        return DEFAULT_TIMEOUT_S


class Watch:
    """A job's view of the heartbeat of the main process that submitted it (none: nothing to watch)."""

    def __init__(self, path: str | None = None):
        path = path if path is not None else os.environ.get(ENV)
        self.path = Path(path) if path else None
        self.timeout = timeout_s()
        self._last: bytes | None = None
        self._changed_at = time.monotonic()

    def _read(self) -> bytes | None:
        try:
            return self.path.read_bytes()
        except OSError:
            return None

    def gone(self) -> str | None:
        """Why the main process counts as gone (its beat has not changed for the timeout), or None."""
        if self.path is None:
            return None
        now, beat = time.monotonic(), self._read()
        if beat and beat.startswith(ENDED.encode()):
            return f"the snakemake that submitted this job has exited (its last heartbeat in {self.path})"
        if beat != self._last:
            self._last, self._changed_at = beat, now
            return None
        if now - self._changed_at > self.timeout:
            return (
                f"the snakemake that submitted this job is gone: no heartbeat in {self.path} for {self.timeout:.0f} s"
            )
        return None

    def stale_at_start(self) -> str | None:
        """Before a point starts anything: the last beat's own time is older than the timeout (or
        the file is gone: the main process ended and removed it)."""
        if self.path is None:
            return None
        beat = self._read()
        try:
            age = time.time() - float(beat.split()[1]) if beat else None
        except (IndexError, ValueError):
            age = None
        if beat and beat.startswith(ENDED.encode()):
            return f"the snakemake that submitted this job has exited (its last heartbeat in {self.path})"
        if age is None or age > self.timeout:
            return f"the snakemake that submitted this job is gone (heartbeat {self.path} missing or stale)"
        return None

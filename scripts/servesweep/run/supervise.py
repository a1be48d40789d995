"""A point driver killed by any signal still leaves its failure record, naming the signal.

A process cannot write anything once SIGKILLed, and only its parent learns which signal ended it.
So ``run-point`` forks: the child drives the point; the parent (already imported, nothing to
start) only waits, passes on the signals it receives, and, when the child died of a signal, writes
``failure.json`` naming it and the child's last progress line, then ends whatever the child had
started. If the parent itself is SIGKILLed, the child learns it through its parent-death signal
(``driver_io.ORPHANED``): a parent that could catch its signal would have passed it on, so it was SIGKILL.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import traceback
from pathlib import Path

import psutil

from ..contract import paths
from .attempts import record_failure
from .bench import signal_name
from .driver_io import ORPHANED, SUPERVISOR
from .spawn import die_with_parent

PASSED_ON = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
TREE_EVERY_S = 1.0


def supervised(drive, run_dir: Path) -> int:
    """``drive()`` in a forked child; its exit code, or 128 + the signal that killed it (recorded)."""
    sys.stdout.flush()
    sys.stderr.flush()
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:  # the driver
        code = 1
        SUPERVISOR[:] = [parent]
        try:
            die_with_parent(ORPHANED)
            if os.getppid() != parent:  # gone before the parent-death signal was armed
                os.kill(os.getpid(), ORPHANED)
            code = drive()
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 1
            if not isinstance(e.code, int) and e.code is not None:
                print(e.code, file=sys.stderr)
        except BaseException:  # noqa: BLE001 - the child must end here, never return into the caller
            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    return _wait(pid, run_dir)


def _wait(pid: int, run_dir: Path) -> int:
    old = {s: signal.signal(s, lambda signum, _f: _pass_on(pid, signum)) for s in PASSED_ON}
    seen: dict[int, psutil.Process] = {}
    done = threading.Event()
    threading.Thread(target=_remember_tree, args=(pid, seen, done), daemon=True).start()
    try:
        while True:
            try:
                _, status = os.waitpid(pid, 0)
                break
            except InterruptedError:
                continue
    finally:
        done.set()
        for s, h in old.items():
            signal.signal(s, h)
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        record_killed(run_dir, pid, sig)
        _end(seen.values())
        return 128 + sig
    return os.WEXITSTATUS(status)


def _pass_on(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass


def _remember_tree(pid: int, seen: dict, done: threading.Event) -> None:
    """What the driver started (aiperf, a stack's processes), so a killed driver leaves none behind."""
    while not done.wait(TREE_EVERY_S):
        try:
            for p in psutil.Process(pid).children(recursive=True):
                seen.setdefault(p.pid, p)
        except psutil.Error:
            return


def _end(procs) -> None:
    for p in procs:
        try:
            if p.is_running():  # psutil compares the start time: a reused pid is not ours
                p.kill()
        except psutil.Error:
            continue


def record_killed(run_dir: Path, pid: int, sig: int) -> None:
    """The failure record of a driver killed by ``sig`` (it could write none itself)."""
    last = _last_line(run_dir / paths.DRIVER_LOG)
    reason = f"the point driver (pid {pid}) was killed by {signal_name(sig)}" + (
        f"; its last progress line: {last}" if last else " before it logged anything"
    )
    print(f"servesweep: {reason}", file=sys.stderr, flush=True)
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        record_failure(run_dir, reason, signal=signal_name(sig))
    except OSError as e:
        print(f"servesweep: could not write {run_dir / paths.FAILURE_FILE}: {e}", file=sys.stderr)


def _last_line(log: Path) -> str:
    try:
        lines = log.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    return lines[-1].strip() if lines else ""

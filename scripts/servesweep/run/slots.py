"""Port slots at run time: every port of a plan shifted by ``slot * port_block``.

A slot is held by an exclusive ``flock`` for the whole stack, and each port is
probed with a bind before anything starts: two stacks on one host never share a port.
"""

from __future__ import annotations

import fcntl
import os
import socket
import zlib
from pathlib import Path


class PortsBusy(Exception):
    pass


def port_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def default_lock_dir() -> Path:
    """Per user: another user's stacks are avoided by the bind probe, never by sharing lock files."""
    return Path(os.environ.get("SERVESWEEP_PORT_LOCKS") or f"/tmp/servesweep-{os.getuid()}/port-slots")


def private_dir(path: Path) -> Path:
    """``path`` created 0700 (missing parents too) and checked to be this user's alone (and its
    ``servesweep-<uid>`` parent): a directory made by someone else, or open to others, is a clear
    error instead of a PermissionError traceback."""
    try:
        for d in reversed([path, *path.parents]):
            if not d.exists():
                d.mkdir(mode=0o700)
        mine = [path, path.parent] if path.parent.name.startswith("servesweep-") else [path]
        stats = [(d, d.stat()) for d in mine]
    except OSError as e:
        raise PortsBusy(f"{path}: unusable for port-slot locks ({e.strerror}); set SERVESWEEP_PORT_LOCKS") from None
    for d, st in stats:
        if st.st_uid != os.getuid() or st.st_mode & 0o077:
            raise PortsBusy(
                f"{d}: owned by uid {st.st_uid} with mode {oct(st.st_mode & 0o777)}, not private to uid "
                f"{os.getuid()}; remove it or set SERVESWEEP_PORT_LOCKS to a directory of your own"
            )
    return path


class SlotLease:
    """Hold one port slot for the life of a stack."""

    def __init__(self, slot: int, fd: int):
        self.slot, self._fd = slot, fd

    def release(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def lease_slot(
    ports: list[int],
    block: int,
    slots: int,
    seed: str = "",
    host: str = "127.0.0.1",
    lock_dir: Path | None = None,
) -> tuple[SlotLease, list[str]]:
    """Pick a slot whose lock is free and whose ports are all bindable.

    Returns the lease and notes about slots skipped (ports held by others).
    """
    lock_dir = private_dir(lock_dir or default_lock_dir())
    start = zlib.crc32(seed.encode()) % slots if seed else 0
    notes = []
    for k in range(slots):
        slot = (start + k) % slots
        fd = os.open(lock_dir / f"slot-{slot}.lock", os.O_CREAT | os.O_RDWR, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        busy = [p + slot * block for p in ports if not port_free(p + slot * block, host)]
        if busy:
            notes.append(f"port slot {slot} skipped: port(s) {busy[:5]} already bound by another program")
            os.close(fd)
            continue
        return SlotLease(slot, fd), notes
    raise PortsBusy(
        f"no free port slot among {slots} (block {block}): "
        + ("; ".join(notes) or "all slots are held by other points")
    )

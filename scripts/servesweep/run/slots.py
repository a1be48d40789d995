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
    return Path(os.environ.get("SERVESWEEP_PORT_LOCKS", "/tmp/servesweep-port-slots"))


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
    lock_dir = lock_dir or default_lock_dir()
    lock_dir.mkdir(parents=True, exist_ok=True)
    start = zlib.crc32(seed.encode()) % slots if seed else 0
    notes = []
    for k in range(slots):
        slot = (start + k) % slots
        fd = os.open(lock_dir / f"slot-{slot}.lock", os.O_CREAT | os.O_RDWR, 0o644)
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

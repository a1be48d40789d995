"""Every port any process binds.

Rendering assigns ports from the cluster's ``port_base`` in plan order, so a
plan is deterministic. At run time the driver picks a free *slot* and shifts
every port by ``slot * port_block``: two points on one host never share a
port. A slot is held by an exclusive ``flock`` for the whole point, and each
port is probed with a bind before anything starts.
"""

from __future__ import annotations

import fcntl
import os
import socket
import zlib
from dataclasses import dataclass
from pathlib import Path

# Every port stays below 32768: Dynamo parses DYN_SYSTEM_PORT as a signed 16-bit
# integer (measured: 40753 is rejected), and Linux hands out 32768+ as ephemeral ports.
PORT_LIMIT = 32768


def usable_slots(base: int, block: int, slots: int) -> int:
    """How many of `slots` blocks fit below PORT_LIMIT."""
    return max(0, min(slots, (PORT_LIMIT - base) // block))


@dataclass(frozen=True)
class Port:
    name: str
    number: int
    count: int = 1  # a block, e.g. KV-event ports base + dp_rank


class PortAllocator:
    def __init__(self, base: int, block: int):
        self.base, self.block, self.next = base, block, base

    def take(self, name: str, count: int = 1) -> Port:
        p = Port(name, self.next, count)
        self.next += count
        return p

    @property
    def used(self) -> int:
        return self.next - self.base


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
    """Hold one port slot for the life of a point."""

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

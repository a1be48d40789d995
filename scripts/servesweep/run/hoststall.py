"""A host that stood still during a benchmark: a paused VM, a suspended job, a stepped clock.

The monotonic clock does not advance while a VM is paused; the wall clock catches up when it
resumes. Every latency measured across such a jump is void, and Dynamo's file discovery (keys
expire by wall-clock mtime) may have dropped a worker's registration meanwhile. It is an
infrastructure failure: the point is run again, once, on a stack that was not there."""

from __future__ import annotations

import time

from .ready import PointFailed

STALL_S = 5.0  # NTP slews far slower than this; a pause or a step does not
RETRIES = 1


class HostStalled(PointFailed):
    """The host stood still during the benchmark; the message says for how long."""


class ClockWatch:
    def __init__(self, wall=time.time, mono=time.monotonic):
        self._wall, self._mono = wall, mono
        self._offset = wall() - mono()
        self.worst_s = 0.0

    def look(self) -> float:
        """The largest jump of the wall clock against the monotonic one so far, in seconds."""
        self.worst_s = max(self.worst_s, abs(self._wall() - self._mono() - self._offset))
        return self.worst_s


def verdict(jump_s: float, other_reasons: list[str]) -> HostStalled | None:
    if jump_s < STALL_S:
        return None
    why = (
        f"the host stood still for about {jump_s:.0f} s during the benchmark (its wall clock jumped against "
        "the monotonic clock: a paused VM, a suspended job or a clock step): every latency of this run is void"
    )
    return HostStalled("; ".join([why, *other_reasons]))

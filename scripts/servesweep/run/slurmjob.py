"""A Slurm job as a held stack's points see it from the submitting host: its state, batch host,
time left and restarts (squeue, else accounting once the controller forgot it), and which of its
ends are the infrastructure's (retried) rather than the configuration's."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

from .slurm import AllocationError, query

LIVE = ("PENDING", "CONFIGURING", "RUNNING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESIZING", "SUSPENDED")
# ends a point is retried after (a bounded number of times): the allocation, not the configuration
INFRASTRUCTURE_ENDS = ("TIMEOUT", "NODE_FAIL", "PREEMPTED", "BOOT_FAIL", "DEADLINE")
POLL_S = float(os.environ.get("SERVESWEEP_SQUEUE_POLL_S", "2"))


@dataclass(frozen=True)
class Job:
    id: str
    state: str  # Slurm's, or GONE once the controller forgot it
    host: str  # its batch host
    left_s: float | None  # time left before its limit

    @property
    def live(self) -> bool:
        return self.state in LIVE


def job(job_id: str) -> Job:
    try:
        out = query(["squeue", "-h", "-t", "all", "-j", job_id, "-o", "%T|%B|%L"]).strip().splitlines()
    except AllocationError as e:
        if "Invalid job id" not in str(e):
            raise
        out = []  # the controller forgot the job (MinJobAge after its end): ask accounting
    if not out:
        return Job(job_id, _accounted_state(job_id), "", None)
    state, host, left = (out[0].split("|") + ["", ""])[:3]
    return Job(job_id, state.strip(), host.strip(), seconds(left))


def restarts(job_id: str) -> int | None:
    """How often Slurm requeued the job (node failure, preemption, ``scontrol requeue``); None if unknown."""
    try:
        out = query(["squeue", "-h", "-t", "all", "-j", job_id, "-O", "RestartCnt"]).split()
        return int(out[0]) if out else None
    except (AllocationError, ValueError):
        return None


def infrastructure_end(after: Job, restarts_before: int | None, restarts_now: int | None) -> str | None:
    """How the allocation, not the point, ended a step that failed: ``requeued`` (the job is live
    again, run once more), its end state (time limit, node failure, preemption), or None (the point's
    own failure, or a cancel: neither is retried)."""
    if after.live:
        known = restarts_before is not None and restarts_now is not None
        return "requeued" if known and restarts_now > restarts_before else None
    state = after.state.split()[0] if after.state.strip() else ""
    return state if state in INFRASTRUCTURE_ENDS else None


def settled(job_id: str) -> Job | None:
    """The job's state once it has settled (COMPLETING turns into its end state within seconds)."""
    deadline = time.monotonic() + 30
    try:
        j = job(job_id)
        while j.state == "COMPLETING" and time.monotonic() < deadline:
            time.sleep(POLL_S)
            j = job(job_id)
        return j
    except AllocationError:
        return None


def _accounted_state(job_id: str) -> str:
    """A job squeue forgot: its end state from accounting, where there is accounting."""
    try:
        lines = query(["sacct", "-n", "-X", "-P", "-j", job_id, "-o", "State"]).split()
    except AllocationError:
        return "GONE"
    return lines[0].split()[0] if lines else "GONE"


def seconds(text: str) -> float | None:
    """Slurm's [days-]hours:minutes:seconds (or minutes:seconds)."""
    text = text.strip()
    try:
        days, _, rest = text.rpartition("-")
        parts = [int(x) for x in rest.split(":")]
    except ValueError:
        return None
    while len(parts) < 3:
        parts.insert(0, 0)
    return (int(days or 0) * 24 + parts[0]) * 3600 + parts[1] * 60 + parts[2]

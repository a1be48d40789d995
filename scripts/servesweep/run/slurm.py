"""The Slurm allocation the driver runs in: node names and addresses.

The jobstep plugin strips SLURM_* variables (but the job id) before a rule
runs, so the node list is read back from the controller.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass


class AllocationError(Exception):
    pass


@dataclass(frozen=True)
class Allocation:
    job_id: str
    names: list[str]
    addrs: list[str]


def query(argv: list[str]) -> str:
    """A Slurm command's output; AllocationError with its message if it fails."""
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise AllocationError(f"{argv[0]} failed: {e}") from None
    if out.returncode != 0:
        raise AllocationError(f"{' '.join(argv)} failed: {out.stderr.strip()}")
    return out.stdout


def node_addr(name: str) -> str:
    for tok in query(["scontrol", "show", "node", name]).split():
        if tok.startswith("NodeAddr="):
            return tok.split("=", 1)[1]
    return name


def current_allocation() -> Allocation:
    job_id = os.environ.get("SLURM_JOB_ID")
    if not job_id:
        raise AllocationError("this plan runs on Slurm, but the driver is not inside an allocation (no SLURM_JOB_ID)")
    # Ask the controller: inside a job step SLURM_JOB_NODELIST may be the step's nodes only.
    nodelist = query(["squeue", "-h", "-j", job_id, "-o", "%N"]).strip()
    names = query(["scontrol", "show", "hostnames", nodelist]).split()
    if not names:
        raise AllocationError(f"job {job_id} has no nodes")
    return Allocation(job_id, names, [node_addr(n) for n in names])


def srun_step(host: str, name: str, job: str | None = None, cpus: int | None = None) -> list[str]:
    """The srun prefix of one step on ``host``, beside the job's other steps (``--overlap``), ended
    with them if it fails; ``job``: in that job, from outside it (a held stack's points); ``cpus``: the
    step's CPUs (Slurm 22.05's srun no longer takes the job's --cpus-per-task: one CPU without it)."""
    step = ["srun", *([f"--jobid={job}"] if job else []), "--overlap", "--nodes=1", "--ntasks=1"]
    step += [f"--cpus-per-task={cpus}"] if cpus else []
    return step + [f"--nodelist={host}", "--kill-on-bad-exit=1", f"--job-name=servesweep-{name}", "--export=ALL"]

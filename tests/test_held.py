"""Held stacks without Slurm: which stack a point joins, what the stack's job asks for, and how
Slurm's answers are read (the real-Slurm tests are in test_slurm.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from servesweep.contract.stack_registry import Current
from servesweep.run.held import HoldRequest, held_decision
from servesweep.run.slurmjob import Job
from servesweep.run.slurmjob import seconds as slurm_seconds
from servesweep.run.stackdir import State

CUR = Current("s1", Path("/x/s1"), 0, "host:1", "abcd", 0.0, "42")
RUNNING = Job("42", "RUNNING", "node1", 3600.0)


@pytest.mark.parametrize(
    "cur,state,job,expected",
    [
        (CUR, State.READY, RUNNING, "join"),
        (CUR, None, Job("42", "PENDING", "", None), "join"),  # still queued: wait with it, never a second job
        (CUR, State.STARTING, RUNNING, "join"),
        (CUR, State.DEAD, RUNNING, "fail"),  # died while its job lives: fail, do not restart per point
        (CUR, State.STOPPED, RUNNING, "start"),  # stopping: its job ends with it
        (CUR, State.READY, Job("42", "CANCELLED", "", None), "start"),
        (CUR, State.DEAD, Job("42", "GONE", "", None), "start"),  # an old run's dead stack: a new one
        (CUR, State.READY, Job("42", "RUNNING", "node1", 30.0), "start"),  # too little time left
        (None, None, None, "start"),
        (Current("s1", Path("/x/s1"), 0, "host:1", "abcd"), State.READY, RUNNING, "start"),  # not a held one
        (Current("s1", Path("/x/s1"), 0, "host:1", "other", 0.0, "42"), State.READY, RUNNING, "start"),
    ],
)
def test_a_point_joins_the_held_stack_or_starts_one(cur, state, job, expected):
    assert held_decision(cur, "abcd", state, job, need_s=120) == expected


@pytest.mark.parametrize(
    "job,canary,expected",
    [
        (Job("42", "FAILED", "", None), "host:1", "fail"),  # died in this run, its job gone: the canary spoke
        (RUNNING, "host:1", "fail"),
        (Job("42", "FAILED", "", None), "host:2", "start"),  # an earlier run's dead stack: this run tries anew
        (Job("42", "FAILED", "", None), None, "start"),  # --config canary=0: each point tries
    ],
)
def test_a_stack_that_died_in_this_run_ends_its_configurations_other_points(job, canary, expected):
    assert held_decision(CUR, "abcd", State.DEAD, job, need_s=120, canary=canary) == expected
    assert held_decision(CUR, "abcd", State.READY, RUNNING, need_s=120, canary=canary) == "join"


@pytest.mark.parametrize(
    "text,seconds",
    [("1-02:03:04", 93784), ("02:03:04", 7384), ("03:04", 184), ("UNLIMITED", None), ("INVALID", None)],
)
def test_slurm_time_left_is_read(text, seconds):
    assert slurm_seconds(text) == seconds


def test_the_stack_job_asks_for_the_plans_shape():
    req = HoldRequest(2, 2, 4, True, 8, 64000, 95, "gpu", None)
    assert req.sbatch_options() == [
        "--nodes=2", "--ntasks=2", "--cpus-per-task=8", "--mem=64000M", "--time=95",
        "--gres=gpu:4", "--exclusive", "--partition=gpu",
    ]  # fmt: skip
    assert "--gres" not in " ".join(HoldRequest(1, 2, 0, False, 1, 100, 5).sbatch_options())


def test_a_step_cut_by_the_jobs_end_counts_only_after_its_own_valid_result(tmp_path):
    """The keeper may end the held job once the last expected point reported; Slurm then cancels that
    point's step while its driver exits. Only a result this step wrote, for this plan, makes it a success."""
    import json
    import os
    import time

    from servesweep.contract.plan import Plan
    from servesweep.run.heldstep import _written
    from servesweep.tools.samples import result_doc

    from helpers import plan_of

    plan = Plan.from_json(plan_of("local-agg-2x-mocker"))
    result = tmp_path / "c2.json"
    since = time.time()
    assert not _written(plan, result, since, "result.schema.yaml")  # none written
    doc = result_doc("local-agg-2x-mocker", 2, 0.2, 1000.0)
    doc["identity"]["plan_fingerprint"] = plan.fingerprints["plan"]
    result.write_text(json.dumps(doc))
    assert _written(plan, result, since, "result.schema.yaml")
    os.utime(result, (since - 60, since - 60))
    assert not _written(plan, result, since, "result.schema.yaml")  # an earlier run's
    doc["identity"]["plan_fingerprint"] = "another plan"
    result.write_text(json.dumps(doc))
    assert not _written(plan, result, since, "result.schema.yaml")
    result.write_text("{half a result")
    assert not _written(plan, result, since, "result.schema.yaml")


def test_a_job_the_controller_forgot_is_gone_not_an_error(monkeypatch):
    """squeue refuses a job id slurmctld purged (MinJobAge after its end): the held stack recorded
    with it is over, and the next point starts a new one (found on the rig: a follow-up run)."""
    from servesweep.run import slurmjob

    def squeue(argv):
        if argv[0] == "squeue":
            raise slurmjob.AllocationError("squeue -j 26 failed: slurm_load_jobs error: Invalid job id specified")
        raise slurmjob.AllocationError("sacct failed: no accounting")

    monkeypatch.setattr(slurmjob, "query", squeue)
    assert slurmjob.job("26") == Job("26", "GONE", "", None)
    assert held_decision(CUR, "abcd", State.READY, slurmjob.job("26"), need_s=120) == "start"

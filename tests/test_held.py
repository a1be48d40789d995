"""Held stacks without Slurm: which stack a point joins, what the stack's job asks for, and how
Slurm's answers are read (the real-Slurm tests are in test_slurm.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from servesweep.run.slurmjob import Job
from servesweep.run.slurmjob import seconds as slurm_seconds
from servesweep.run.stacks.decide import join_start_or_fail
from servesweep.run.stacks.held import HoldRequest, held_seen
from servesweep.run.stacks.registry import Current, State

CUR = Current("s1", Path("/x/s1"), 0, "host:1", "abcd", 0.0, "42")
RUNNING = Job("42", "RUNNING", "node1", 3600.0)


def decide_held(cur, server, state, job, need_s, canary=None):
    """A held point's decision as ``stacks/held`` takes it: its job stands for its keeper."""
    return join_start_or_fail(cur, server, canary, held_seen(state, job, need_s))


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
    assert decide_held(cur, "abcd", state, job, need_s=120) == expected


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
    assert decide_held(CUR, "abcd", State.DEAD, job, need_s=120, canary=canary) == expected
    assert decide_held(CUR, "abcd", State.READY, RUNNING, need_s=120, canary=canary) == "join"


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
    from servesweep.run.stacks.held_step import _written
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


def test_a_step_killed_after_writing_its_result_succeeds_though_squeue_says_running(tmp_path, monkeypatch):
    """The keeper ends the job once the last point reported; slurmd kills that point's step before the
    controller marks the job ending (found on the rig: squeue still said RUNNING, and a measured point
    failed its rule). A valid result the step wrote is a success whatever the job's state."""
    import json
    import types

    from servesweep.contract.plan import Plan
    from servesweep.run.stacks import held_step
    from servesweep.tools.samples import result_doc

    from helpers import plan_of

    plan = Plan.from_json(plan_of("local-agg-2x-mocker"))
    result, said = tmp_path / "c2.json", []
    doc = result_doc("local-agg-2x-mocker", 2, 0.2, 1000.0)
    doc["identity"]["plan_fingerprint"] = plan.fingerprints["plan"]

    class KilledAfterWriting:
        def __init__(self, argv, **_):
            result.write_text(json.dumps(doc))

        def wait(self):
            return 137

    held = types.SimpleNamespace(
        plan=plan, result_path=result, say=said.append, wait_running=lambda cur: Job("7", "RUNNING", "n1", 60.0),
        wait_incarnation=lambda cur: 0, wait_canary=lambda cur: None,
    )  # fmt: skip
    monkeypatch.setattr(held_step.subprocess, "Popen", KilledAfterWriting)
    monkeypatch.setattr(held_step, "settled", lambda job: Job(job, "RUNNING", "n1", 60.0))
    monkeypatch.setattr(held_step, "restarts", lambda job: 0)
    step = held_step.Step(held, ["run-point"], "c2", record=True)
    assert step.run(CUR, "result.schema.yaml") == (0, None)
    assert any("its file written" in line for line in said)
    result.unlink()
    assert step.run(CUR, "result.schema.yaml")[0] == 0  # written again by this attempt
    monkeypatch.setattr(held_step.subprocess, "Popen", lambda argv, **_: types.SimpleNamespace(wait=lambda: 137))
    result.unlink()
    assert step.run(CUR, "result.schema.yaml") == (137, None)  # killed before writing: the point failed


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
    assert decide_held(CUR, "abcd", State.READY, slurmjob.job("26"), need_s=120) == "start"


def test_the_bill_takes_the_startup_and_each_points_time_from_the_latest_results(tmp_path):
    """Two points measured on one stack (a 20 s gap between them), one on an older stack, one never
    measured: the latest stack's startup, each measured point's benchmark plus the idle per point."""
    import json

    from servesweep.workflow.bill import measured

    def result(recipe, conc, stack, start, end, startup, bench):
        path = tmp_path / f"results/{recipe}/c{conc}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        ident = {"stack": {"id": stack, "startup_s": startup}, "start_time": f"2026-12-01T00:{start}+00:00",
                 "end_time": f"2026-12-01T00:{end}+00:00"}  # fmt: skip
        path.write_text(json.dumps({"identity": ident, "timings_s": {"bench": bench}}))

    result("a", 2, "old", "00:00", "01:00", 300.0, 50.0)
    result("a", 4, "new", "10:00", "11:00", 120.0, 55.0)
    result("b", 8, "new", "11:20", "12:20", 120.0, 58.0)
    (tmp_path / "results/b/c16.json").write_text("{half")
    m = measured(tmp_path, [("a", 2), ("a", 4), ("b", 8), ("b", 16), ("b", 32)])
    assert m.startup_s == 120.0 and m.idle_per_point_s == 10.0  # 20 s between the new stack's 2 points
    assert m.bench_s == {("a", 2): 50.0, ("a", 4): 55.0, ("b", 8): 58.0}
    assert measured(tmp_path, [("c", 1)]).startup_s is None


@pytest.mark.parametrize(
    "after,before,now,end",
    [
        (Job("7", "PENDING", "", None), 0, 1, "requeued"),  # scontrol requeue, node failure, preemption
        (Job("7", "RUNNING", "n1", 60.0), 1, 1, None),  # the point's own failure: the job goes on
        (Job("7", "PENDING", "", None), None, 1, None),  # restarts unknown: not guessed
        (Job("7", "TIMEOUT", "", None), None, None, "TIMEOUT"),
        (Job("7", "NODE_FAIL", "", None), None, None, "NODE_FAIL"),
        (Job("7", "PREEMPTED", "", None), None, None, "PREEMPTED"),
        (Job("7", "CANCELLED by 0", "", None), None, None, None),  # a cancel is the user's
        (Job("7", "FAILED", "", None), None, None, None),
        (Job("7", "GONE", "", None), None, None, None),
    ],
)
def test_only_the_allocations_end_is_an_infrastructure_failure(after, before, now, end):
    from servesweep.run.slurmjob import infrastructure_end

    assert infrastructure_end(after, before, now) == end


def test_a_stacks_waiting_points_take_turns_in_order_and_a_dead_ones_ticket_is_dropped(tmp_path):
    import subprocess

    from servesweep.run.stacks.held import _first_alive

    dead = subprocess.Popen(["true"])
    dead.wait()
    for name in (f"0+a+000000004+{os.getpid()}", f"0+a+000000002+{dead.pid}", f"1+a+smoke+{os.getpid()}"):
        (tmp_path / name).touch()
    assert _first_alive(tmp_path) == f"0+a+000000004+{os.getpid()}"  # c2's point is gone: c4 is next
    assert not (tmp_path / f"0+a+000000002+{dead.pid}").exists()
    (tmp_path / f"0+a+000000016+{os.getpid()}").touch()
    assert _first_alive(tmp_path) == f"0+a+000000004+{os.getpid()}"  # c4 before c16, checks last

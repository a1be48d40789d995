"""A host that stood still (paused VM, suspended job, stepped clock) voids a benchmark and is retried
once; a frontend that stops seeing the plan's registrations breaks the stack (unit level)."""

from __future__ import annotations

import json

import pytest

from servesweep.run import driver, hoststall, ready


class Clocks:
    def __init__(self):
        self.wall, self.mono = 1000.0, 50.0

    def tick(self, mono_s: float, wall_s: float | None = None) -> None:
        self.mono += mono_s
        self.wall += mono_s if wall_s is None else wall_s


def test_a_wall_clock_jump_against_the_monotonic_clock_is_a_stall():
    c = Clocks()
    w = hoststall.ClockWatch(wall=lambda: c.wall, mono=lambda: c.mono)
    c.tick(3.0)
    assert w.look() == 0.0 and hoststall.verdict(w.look(), []) is None
    c.tick(10.0, wall_s=53.0)  # a VM paused for 43 s: only the wall clock caught up
    c.tick(1.0)
    assert w.look() == pytest.approx(43.0)
    v = hoststall.verdict(w.look(), ["frontend sees registrations {'backend': 1}"])
    assert isinstance(v, hoststall.HostStalled) and isinstance(v, ready.PointFailed)
    assert "stood still for about 43 s" in str(v) and "registrations {'backend': 1}" in str(v)


def test_a_small_clock_slew_is_not_a_stall():
    c = Clocks()
    w = hoststall.ClockWatch(wall=lambda: c.wall, mono=lambda: c.mono)
    c.tick(600.0, wall_s=600.5)
    assert hoststall.verdict(w.look(), ["other"]) is None


class FakePlan:
    frontends = ["frontend"]
    expect_registrations = {"backend": 2}


def _watch_with(monkeypatch, answers):
    seq = iter(answers)
    monkeypatch.setattr(ready, "_seen_by", lambda plan, ctx, fe: next(seq))
    w = ready.RegistrationWatch(FakePlan())
    w.EVERY_S = 0.0
    return w


def test_registrations_that_differ_twice_in_a_row_break_the_stack(monkeypatch):
    w = _watch_with(monkeypatch, [{"backend": 2}, {"backend": 1}, {"backend": 1}])
    w.look(None, "mid-curve")
    w.look(None, "mid-curve")
    with pytest.raises(ready.PointFailed, match=r"sees registrations \{'backend': 1\} mid-curve.*lapsed"):
        w.look(None, "mid-curve")


def test_one_odd_look_is_not_a_drift_and_a_silent_look_is_no_evidence(monkeypatch):
    answers = [{"backend": 1}, {"backend": 2}, {"backend": 3}, None, {"backend": 2}, None, None, {"backend": 2}]
    w = _watch_with(monkeypatch, answers)
    for _ in answers:
        w.look(None, "mid-curve")
    assert w.differs == {}


def test_a_differing_look_still_counts_across_a_silent_one(monkeypatch):
    """A frontend that does not answer is never read as "no drift": the odd look before it stands."""
    w = _watch_with(monkeypatch, [{"backend": 3}, None, {"backend": 3}])
    w.look(None, "mid-curve")
    w.look(None, "mid-curve")
    with pytest.raises(ready.PointFailed, match=r"sees registrations \{'backend': 3\} mid-curve"):
        w.look(None, "mid-curve")


def test_a_frontend_silent_past_the_bound_fails_the_stack(monkeypatch):
    monkeypatch.setattr(ready, "STALL_FAIL_S", 0.0)
    w = _watch_with(monkeypatch, [None])
    with pytest.raises(ready.PointFailed, match="frontend has not answered /health for 0 s mid-curve: a stopped"):
        w.look(None, "mid-curve")


def test_a_silent_frontend_at_the_end_is_a_reason_not_a_clean_run(monkeypatch):
    monkeypatch.setattr(ready, "_seen_by", lambda plan, ctx, fe: None)
    (reason,) = ready.registration_drift(FakePlan(), None)
    assert "frontend did not answer /health" in reason and "foreign" not in reason


def test_a_stalled_attempt_runs_again_once_and_a_second_stall_fails(monkeypatch, tmp_path):
    calls = []

    def attempt(plan, plan_path, result_path, run_dir, join, handlers, retries):
        calls.append(retries)
        return None if retries else 1  # stalled every time: the last attempt fails

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(driver, "private_plan", lambda p: FakePlan())
    monkeypatch.setattr(driver, "_attempt", attempt)
    monkeypatch.setattr(driver, "default_log_dir", lambda plan: tmp_path / "logs/r/c2")
    monkeypatch.setattr(driver, "die_with_parent", lambda sig: None)
    monkeypatch.setattr(driver, "supervised", lambda drive, run_dir: drive())  # no fork in a unit test
    assert driver.run_point(tmp_path / "plan.json", tmp_path / "results/r/c2.json") == 1
    assert calls == [1, 0]


def test_a_kept_attempt_names_its_files_where_they_are_now(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run_dir = tmp_path / "logs/r/c4"
    run_dir.mkdir(parents=True)
    reason = (
        f"the full result is kept in {run_dir}/result.unsaved.json and aiperf's artifacts in {run_dir}/aiperf; "
        "see logs/r/c4/driver.log (an earlier one: logs/r/c4.attempt-7)"
    )
    (run_dir / "failure.json").write_text(json.dumps({"reason": reason, "logs": str(run_dir)}))
    driver.keep_earlier_attempt(run_dir)
    doc = json.loads((tmp_path / "logs/r/c4.attempt-1/failure.json").read_text())
    assert doc["reason"] == (
        f"the full result is kept in {run_dir}.attempt-1/result.unsaved.json and aiperf's artifacts in "
        f"{run_dir}.attempt-1/aiperf; see logs/r/c4.attempt-1/driver.log (an earlier one: logs/r/c4.attempt-7)"
    )
    assert doc["logs"] == f"{run_dir}.attempt-1" and doc["moved_from"] == str(run_dir)
    assert not run_dir.exists()

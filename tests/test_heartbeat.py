"""The main snakemake's heartbeat: a job's watch counts it gone only after the beat has stopped
changing for the timeout (on the job's own clock), and a point does not start for a stale one."""

from __future__ import annotations

import time

from servesweep.contract import heartbeat


class Clock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_a_beat_that_stops_changing_is_gone_after_the_timeout(tmp_path, monkeypatch):
    clock = Clock()
    monkeypatch.setattr(heartbeat.time, "monotonic", clock)
    monkeypatch.setenv(heartbeat.TIMEOUT_ENV, "30")
    f = tmp_path / "beat"
    f.write_text(f"1 {time.time()}\n")
    w = heartbeat.Watch(str(f))
    assert w.gone() is None
    clock.t += 29
    assert w.gone() is None
    f.write_text(f"2 {time.time()}\n")  # a new beat: the count starts again
    clock.t += 29
    assert w.gone() is None
    clock.t += 29
    assert w.gone() is None
    clock.t += 2
    assert "no heartbeat" in w.gone() and str(f) in w.gone()


def test_a_removed_beat_file_counts_as_stopped(tmp_path, monkeypatch):
    clock = Clock()
    monkeypatch.setattr(heartbeat.time, "monotonic", clock)
    monkeypatch.setenv(heartbeat.TIMEOUT_ENV, "30")
    f = tmp_path / "beat"
    f.write_text("1 0\n")
    w = heartbeat.Watch(str(f))
    assert w.gone() is None
    f.unlink()
    assert w.gone() is None  # a change: counted from now
    clock.t += 31
    assert w.gone()


def test_no_heartbeat_to_watch_is_never_gone(monkeypatch):
    monkeypatch.delenv(heartbeat.ENV, raising=False)
    w = heartbeat.Watch()
    assert w.gone() is None and w.stale_at_start() is None


def test_a_point_does_not_start_for_a_stale_or_missing_beat(tmp_path, monkeypatch):
    monkeypatch.setenv(heartbeat.TIMEOUT_ENV, "30")
    f = tmp_path / "beat"
    f.write_text(f"7 {time.time() - 5}\n")
    assert heartbeat.Watch(str(f)).stale_at_start() is None
    f.write_text(f"7 {time.time() - 60}\n")
    assert "gone" in heartbeat.Watch(str(f)).stale_at_start()
    for junk in ("", "7", "7 x"):
        f.write_text(junk)
        assert heartbeat.Watch(str(f)).stale_at_start()
    f.unlink()
    assert heartbeat.Watch(str(f)).stale_at_start()


def test_the_timeout_is_never_below_three_beats(monkeypatch):
    monkeypatch.setenv(heartbeat.TIMEOUT_ENV, "1")
    assert heartbeat.timeout_s() == 3 * heartbeat.INTERVAL_S
    monkeypatch.setenv(heartbeat.TIMEOUT_ENV, "soon")
    assert heartbeat.timeout_s() == heartbeat.DEFAULT_TIMEOUT_S


def test_the_main_process_beats_into_its_own_file(tmp_path, monkeypatch):
    monkeypatch.setenv(heartbeat.ENV, "")  # start() sets it for the jobs: unset again after the test
    beat = heartbeat.start(tmp_path)
    try:
        path = beat.path
        assert heartbeat.Watch().path == path  # the env var the jobs inherit
        first = path.read_text()  # written before start returns
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and path.read_text() == first:
            time.sleep(0.2)
        assert path.read_text() != first and heartbeat.Watch().stale_at_start() is None
        watch = heartbeat.Watch()
        assert watch.gone() is None
    finally:
        beat.stop()
    # a process that ends says so in its last beat: its jobs stop at once, not a timeout later
    assert "has exited" in watch.gone() and "has exited" in heartbeat.Watch().stale_at_start()

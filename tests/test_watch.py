"""The benchmark window's watch (run/watch) and the driver's supervisor (run/supervise), with real
processes this test starts, stops and kills itself: a tiny HTTP server stands in for a stack process."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys

import pytest

from servesweep.run import bench, driver_io, supervise, watch
from servesweep.run.ready import PointFailed

from helpers import wait_until

SERVER = """
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(b'{"status": "healthy"}')
    def log_message(self, *a):
        pass
s = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
print(s.server_address[1], flush=True)
s.serve_forever()
"""


@pytest.fixture
def server():
    """(pid, health URL) of a live HTTP server; resumed and stopped at the end whatever happened."""
    p = subprocess.Popen([sys.executable, "-c", SERVER], stdout=subprocess.PIPE, text=True)
    try:
        port = int(p.stdout.readline())
        yield p.pid, f"http://127.0.0.1:{port}/health"
    finally:
        os.kill(p.pid, signal.SIGCONT)
        p.kill()
        p.wait(timeout=10)


@pytest.fixture
def quick(monkeypatch):
    """Bounds short enough for a unit test (the behaviour, not the production values, is tested)."""
    monkeypatch.setattr(watch, "RECORD_AFTER_S", 0.3)
    monkeypatch.setattr(watch, "HEALTH_DEADLINE_S", 0.3)
    monkeypatch.setattr(watch, "PROBE_EVERY_S", 0.05)
    monkeypatch.setattr(watch, "TREE_EVERY_S", 0.0)


def _fails(w: watch.StackWatch) -> str:
    def look():
        try:
            w.look("mid-benchmark")
        except PointFailed as e:
            return str(e)
        return None

    return wait_until(look, 30, "the watch to fail the point")


def test_a_stopped_process_fails_the_point_naming_it(server, quick, monkeypatch):
    monkeypatch.setattr(watch, "STALL_FAIL_S", 1.0)
    pid, url = server
    w = watch.StackWatch([watch.Watched("frontend", "frontend", 0, pid, url)])
    try:
        w.look("mid-benchmark")  # running and answering: nothing to say
        os.kill(pid, signal.SIGSTOP)
        msg = _fails(w)
    finally:
        w.stop()
    assert f"frontend (role frontend, index 0, pid {pid}) has served nothing for" in msg
    assert "mid-benchmark (the bound is 1 s)" in msg and f"its process {pid} is stopped (state stopped" in msg


def test_a_silent_health_endpoint_fails_the_point(quick, monkeypatch):
    """Listening but never answering (a hung event loop): only the health probe can see it."""
    monkeypatch.setattr(watch, "STALL_FAIL_S", 1.0)
    with socket.create_server(("127.0.0.1", 0)) as hung:
        url = f"http://127.0.0.1:{hung.getsockname()[1]}/health"
        w = watch.StackWatch([watch.Watched("agg-1", "agg", 1, None, url)])
        try:
            msg = _fails(w)
        finally:
            w.stop()
    assert "agg-1 (role agg, index 1, pid not local) has served nothing" in msg
    assert f"its health endpoint {url} did not answer (" in msg and "0.3 s" in msg


def test_a_pause_that_recovers_inside_the_window_is_recorded_as_a_stall(server, quick, monkeypatch):
    monkeypatch.setattr(watch, "STALL_FAIL_S", 120.0)
    pid, url = server
    w = watch.StackWatch([watch.Watched("frontend", "frontend", 0, pid, url)])
    try:
        os.kill(pid, signal.SIGSTOP)
        wait_until(lambda: w.look("mid-benchmark") or "frontend" in w.open, 30, "the watch to see the stop")
        since = w.open["frontend"][0]
        wait_until(lambda: w.look("mid-benchmark") or w.clock() - since > 0.5, 30, "a pause over the record bound")
        os.kill(pid, signal.SIGCONT)
        wait_until(lambda: w.look("mid-benchmark") or "frontend" not in w.open, 30, "the watch to see it resume")
    finally:
        stalls = w.stop()
    (stall,) = stalls
    assert stall["process"] == "frontend" and stall["seconds"] >= 0.3 and stall["start_s"] >= 0
    assert "is stopped" in stall["seen"]


def test_a_short_blip_is_not_a_stall(server, quick):
    pid, url = server
    w = watch.StackWatch([watch.Watched("frontend", "frontend", 0, pid, url)])
    for _ in range(3):
        w.look("mid-benchmark")
    assert w.stop() == []


def test_targets_name_role_index_and_pid():
    class P:
        def __init__(self, name, role, url):
            self.name, self.role, self.health_url = name, role, url

    class Plan:
        processes = [P("frontend", "frontend", "F"), P("agg-0", "agg", "A0"), P("agg-1", "agg", None)]

    got = watch.targets(Plan(), {"agg-1": 42}, lambda t, n: t and f"http://{n}")
    assert [(w.name, w.role, w.index, w.pid, w.health_url) for w in got] == [
        ("frontend", "frontend", 0, None, "http://frontend"),
        ("agg-0", "agg", 0, None, "http://agg-0"),
        ("agg-1", "agg", 1, 42, None),
    ]


def test_a_driver_killed_by_sigkill_leaves_its_failure_record(tmp_path):
    run_dir = tmp_path / "logs/r/c2"

    def drive():  # the forked driver: a progress line, then a signal nothing can catch
        run_dir.mkdir(parents=True)
        (run_dir / "driver.log").write_text("2026 [r c2] bench: aiperf at concurrency 2\n")
        os.kill(os.getpid(), signal.SIGKILL)

    assert supervise.supervised(drive, run_dir) == 128 + signal.SIGKILL
    doc = json.loads((run_dir / "failure.json").read_text())
    assert doc["signal"] == "SIGKILL" and "was killed by SIGKILL" in doc["reason"]
    assert "its last progress line: 2026 [r c2] bench: aiperf at concurrency 2" in doc["reason"]


def test_a_driver_that_ends_normally_keeps_its_exit_code_and_no_record(tmp_path):
    assert supervise.supervised(lambda: 3, tmp_path) == 3
    assert not (tmp_path / "failure.json").exists()


def test_a_killed_supervisor_is_named_as_sigkill(monkeypatch):
    monkeypatch.setattr(driver_io, "SUPERVISOR", [4242])
    assert str(driver_io.Interrupted(driver_io.ORPHANED)).startswith(
        "the SIGKILL of its supervisor process (servesweep run-point, pid 4242)"
    )
    assert str(driver_io.Interrupted(signal.SIGTERM)) == "SIGTERM"


def test_a_dead_client_is_a_dead_client():
    msg = bench.client_died(-9, 123, "mid-benchmark (12 s in)", "last words")
    assert msg.startswith("client died: aiperf (pid 123) was killed by SIGKILL mid-benchmark (12 s in)")
    assert "aiperf exited with code -9" in msg and "foreign" not in msg
    assert bench.client_died(0, 123, "", "") is None
    assert "aiperf (pid 5) failed" in bench.client_died(2, 5, "", "")


def test_a_consequence_seen_first_names_the_stopped_process_behind_it(server, quick):
    pid, url = server
    w = watch.StackWatch([watch.Watched("agg-1", "agg", 1, pid, url)])
    try:
        os.kill(pid, signal.SIGSTOP)
        wait_until(lambda: w.look("mid-benchmark") or "agg-1" in w.open, 30, "the watch to see the stop")
        lapse = PointFailed("frontend sees registrations {'backend': 1} mid-benchmark\nlog tail")
        msg = str(w.explain(lapse))
    finally:
        w.stop()
    assert msg.startswith("frontend sees registrations {'backend': 1} mid-benchmark; seen meanwhile: ")
    assert f"agg-1 (role agg, index 1, pid {pid}) for " in msg and "is stopped" in msg
    assert msg.endswith("\nlog tail")


def test_a_stack_failure_names_the_running_point_where_the_phase_is_never_after_the_log_tail():
    from servesweep.run.stacks.keeper import _with_point

    died = "process agg-1 exited with code -9 mid-curve; log x/agg-1.log, last lines:\nINFO a\nINFO b"
    assert _with_point(died, "c96 (rehearsed at c32)") == (
        "process agg-1 exited with code -9 mid-curve while point c96 (rehearsed at c32) was running; "
        "log x/agg-1.log, last lines:\nINFO a\nINFO b"
    )
    assert _with_point("stack broke\nINFO a", 4) == "stack broke while point c4 was running\nINFO a"
    assert _with_point("stack broke", None) == "stack broke"


def test_the_phase_of_aiperf_is_read_from_its_log_as_it_grows(tmp_path):
    log = tmp_path / "aiperf.log"
    phase = bench.AiperfPhase(log)
    assert phase.now() == bench.SETUP  # no log yet
    lines = [
        "19:58:45.945 NOTICE   Phase warmup (warmup) started | phase_index=0 | target: 2 requests\n",
        "19:58:46.309 NOTICE   Phase profiling (profiling) started | phase_index=1\n",
        "19:58:51.563 NOTICE   Phase profiling (profiling) complete | completed=47\n",
    ]
    log.write_text("19:58:43.987 INFO     Starting AIPerf System\n" + lines[0] + "19:58:46.309 NOTICE   Phase prof")
    assert phase.now() == "during aiperf's warm-up, before the benchmark"  # a half-written line waits
    with open(log, "a") as f:
        f.write(lines[1].removeprefix("19:58:46.309 NOTICE   Phase prof"))
    assert phase.now() == "mid-benchmark"
    with open(log, "a") as f:
        f.write(lines[2] + lines[1])  # repeats: the next run's profiling starts again
    assert phase.now() == "mid-benchmark"

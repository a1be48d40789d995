"""Faults with real processes on the local stack (frontend + mocker + aiperf).

Each case ends with: a clear message naming the process and the cause, no result
file and no half-written JSON, no process left behind (the whole process table
is checked), and where it applies a rerun that completes only the missing points.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import yaml

from servesweep.report.missing import missing_points
from servesweep.run.slots import port_free
from servesweep.run.trust import CLIENT_STALL_SHARE, STALL_SHARE_ENV

from helpers import (
    BIN,
    ROOT,
    copy_workflow,
    descendants,
    no_processes_left,
    plan_text,
    running_point,
    snakemake,
    wait_for_text,
    wait_until,
)
from helpers import write_recipe as _write_recipe

pytestmark = pytest.mark.integration
BASE = yaml.safe_load((ROOT / "recipes" / "local-agg-2x-mocker.yaml").read_text())


def write_recipe(wf: Path, name: str, **kw) -> str:
    return _write_recipe(wf, BASE, name, **kw)


@pytest.fixture
def fwf(tmp_path):
    return copy_workflow(tmp_path / "wf", recipes=[])


def no_half_written(wf: Path) -> bool:
    return not [p for p in wf.glob("results/**/*") if p.name.startswith(".") or p.suffix == ".tmp"]


def check_clean(wf: Path, *missing: str):
    for m in missing:
        assert not (wf / m).exists(), m
    assert no_half_written(wf)


def failure_reason(wf: Path, recipe: str, conc: int) -> str:
    return json.loads((wf / f"logs/{recipe}/c{conc}/failure.json").read_text())["reason"]


def test_engine_exits_during_startup(fwf, reliability):
    reliability("faults", "engine exits during startup")
    write_recipe(fwf, "ok-point")
    # a value the mocker's parser accepts (bad flags never get this far) but the engine refuses at start
    write_recipe(fwf, "bad-engine", mutate=lambda d: d["engine"]["args"].extend(["--num-gpu-blocks-override", 0]))
    with no_processes_left(fwf):
        r = snakemake(fwf, "results/summary.md", "--keep-going")
    assert r.returncode != 0
    reason = failure_reason(fwf, "bad-engine", 2)
    assert "process agg-0 exited with code 1 during startup" in reason or "agg-1 exited with code 1" in reason
    assert "num_gpu_blocks must be positive" in reason  # the log tail names the cause
    check_clean(fwf, "results/bad-engine/c2.json")
    assert (fwf / "results/ok-point/c2.json").exists()
    # fix the recipe: the rerun runs only the missing point
    write_recipe(fwf, "bad-engine")
    with no_processes_left(fwf):
        r = snakemake(fwf, "results/summary.md")
    assert r.returncode == 0, r.stderr[-2000:]
    out = r.stdout + r.stderr
    assert "results/bad-engine/c2.json" in out and "output: results/ok-point/c2.json" not in out


def test_engine_never_ready_times_out(fwf, reliability):
    reliability("faults", "engine never ready (timeout)")
    # --startup-time: the worker registers at once but blocks requests: only the smoke request sees it
    write_recipe(
        fwf, "slow-engine", mutate=lambda d: d["engine"]["args"].extend(["--startup-time", "600"]), timeout_s=6
    )
    with no_processes_left(fwf):
        r = snakemake(fwf, "results/slow-engine/c2.json")
    assert r.returncode != 0
    assert "stack not ready after 6 s" in failure_reason(fwf, "slow-engine", 2)
    check_clean(fwf, "results/slow-engine/c2.json")


def test_frontend_never_reaches_expected_workers(fwf, reliability):
    """The plan expects 3 backend registrations; the stack only ever has 2."""
    reliability("faults", "frontend short of workers")
    name = write_recipe(fwf, "short-workers", timeout_s=6)
    plan = json.loads(plan_text(fwf, name))
    plan["expect_registrations"] = {"backend": 3}
    (fwf / "plan.json").write_text(json.dumps(plan))
    with no_processes_left(fwf):
        r = subprocess.run(
            [str(BIN / "servesweep"), "run-point", "plan.json", "results/short/c2.json"],
            cwd=fwf, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
    assert r.returncode == 1
    assert "frontend registrations {'backend': 2} of {'backend': 3}" in r.stderr
    check_clean(fwf, "results/short/c2.json")


def _driver(pid: int):
    """The process that drives the point: the forked child of ``servesweep run-point`` (run/supervise)."""
    kids = [k for k in descendants(pid) if k.ppid() == pid]
    return kids[0] if len(kids) == 1 else None


def _aiperf_running(pid: int):
    """aiperf (the driver's newest child) once its own children exist, found by ancestry: aiperf
    renames its processes 1-2 s after start, so its command line cannot be relied on."""
    driver = _driver(pid)
    kids = [k for k in descendants(driver.pid) if k.ppid() == driver.pid] if driver else []
    if not kids:
        return None
    newest = max(kids, key=lambda k: k.create_time())
    return newest if descendants(newest.pid) else None


def _benchmarking(wf: Path, name: str) -> None:
    """Until aiperf's benchmark (its profiling phase) has started: setup and warm-up come first."""
    wait_for_text(wf / f"logs/{name}/c2/aiperf.log", "Phase profiling (profiling) started", 60)


def _kill_mid_bench(wf: Path, name: str, pick) -> tuple[int, str]:
    """Run a point, kill the process `pick` chooses while aiperf runs; (driver exit code, stderr)."""
    with running_point(wf, name) as p:
        wait_for_text(wf / f"logs/{name}/c2/driver.log", "bench: aiperf")
        wait_until(lambda: _aiperf_running(p.pid), 60, "aiperf and its children")
        _benchmarking(wf, name)
        victim = wait_until(lambda: pick(p.pid), 30, "the process to kill")
        victim.kill()
        _, err = p.communicate(timeout=90)
        return p.returncode, err


def test_engine_dies_mid_benchmark(fwf, reliability):
    reliability("faults", "engine dies mid-benchmark")
    name = write_recipe(fwf, "dies-mid", duration=30)

    def second_replica(pid):
        mockers = [k for k in descendants(pid) if "dynamo.mocker" in " ".join(k.cmdline())]
        return next((k for k in mockers if k.environ().get("CUDA_VISIBLE_DEVICES") == "1"), None)

    with no_processes_left(fwf):
        rc, err = _kill_mid_bench(fwf, name, second_replica)
    assert rc == 1
    assert "process agg-1 exited with code -9 mid-benchmark" in err
    check_clean(fwf, f"results/{name}/c2.json")


def test_aiperf_crash(fwf, reliability):
    reliability("faults", "aiperf crashes")
    name = write_recipe(fwf, "aiperf-crash", duration=30)
    with no_processes_left(fwf):
        rc, err = _kill_mid_bench(fwf, name, _aiperf_running)
    assert rc == 1
    reason = failure_reason(fwf, name, 2)
    assert "client died: aiperf (pid" in reason and "was killed by SIGKILL" in reason, reason
    assert "foreign" not in err and "foreign" not in reason  # in-flight requests are not someone else's
    check_clean(fwf, f"results/{name}/c2.json")


def _stack_process(pid: int, marker: str):
    """The process the driver started for ``marker`` (its direct child: the pid a failure names)."""
    driver = _driver(pid)
    kids = [k for k in descendants(driver.pid) if k.ppid() == driver.pid] if driver else []
    return next((k for k in kids if marker in " ".join(k.cmdline())), None)


def test_a_stopped_frontend_fails_the_point_at_once_naming_it(fwf, reliability):
    """SIGSTOP mid-window: the point fails within the watch's bound (run/watch; 4 s here, 10 s by
    default), not after duration + grace (a 60 s benchmark: the wait below ends long before that),
    naming the process. A stopped worker: tests/test_warm_stacks.py (registration lapse)."""
    reliability("faults", "frontend SIGSTOPped mid-benchmark")
    name = write_recipe(fwf, "stopped-frontend", duration=60)
    stopped = []
    try:
        with no_processes_left(fwf), running_point(fwf, name, env={"SERVESWEEP_STALL_FAIL_S": "4"}) as p:
            wait_for_text(fwf / f"logs/{name}/c2/driver.log", "bench: aiperf")
            _benchmarking(fwf, name)
            proc = wait_until(lambda: _stack_process(p.pid, "dynamo.frontend"), 30, "the frontend")
            proc.suspend()
            stopped.append(proc)
            _, err = p.communicate(timeout=45)  # duration + grace would be 90 s
    finally:
        for proc in stopped:  # resumed whatever happened (a stopped process ignores SIGTERM)
            try:
                proc.resume()
            except psutil.NoSuchProcess:
                pass
    assert p.returncode == 1, err[-2000:]
    reason = failure_reason(fwf, name, 2)
    assert f"frontend (role frontend, index 0, pid {stopped[0].pid}) has served nothing for" in reason, reason
    assert "mid-benchmark (the bound is 4 s)" in reason and "is stopped" in reason, reason
    check_clean(fwf, f"results/{name}/c2.json")


def test_a_frontend_paused_and_resumed_inside_the_window_marks_the_point_stalled(fwf, reliability):
    """Stopped 5 s (over the 3 s record bound, under the 10 s failure bound), then resumed: the point
    completes and its result carries the stall, never a steady figure unmarked."""
    reliability("faults", "frontend paused and resumed mid-benchmark")
    name = write_recipe(fwf, "paused-frontend", duration=6)
    with no_processes_left(fwf), running_point(fwf, name) as p:
        wait_for_text(fwf / f"logs/{name}/c2/driver.log", "bench: aiperf")
        _benchmarking(fwf, name)
        proc = wait_until(lambda: _stack_process(p.pid, "dynamo.frontend"), 30, "the frontend")
        proc.suspend()
        try:
            since = time.monotonic()
            wait_until(lambda: time.monotonic() - since > 5 and proc.status() == "stopped", 30, "a 5 s pause")
        finally:
            proc.resume()
        _, err = p.communicate(timeout=120)
    assert p.returncode == 0, err[-2000:]
    (stall,) = json.loads((fwf / f"results/{name}/c2.json").read_text())["stalls"]
    assert stall["process"] == "frontend" and stall["seconds"] >= 3 and "is stopped" in stall["seen"], stall
    assert "stall: frontend served nothing for" in err


@pytest.mark.skipif(os.geteuid() != 0, reason="the busy sibling runs at nice -20: root only")
def test_a_client_starved_by_a_busy_sibling_on_its_core_is_marked_client_bound(fwf, reliability):
    """aiperf's processes pinned for 3 s to one core beside a busy loop at nice -20 (a starved client,
    on purpose), judged at the product's own bound: its event loops report the stalls, the point is
    marked client-bound, its client-timed figures are unmeasured with the reason, and the end-to-end
    rate per user is still recorded."""
    reliability("faults", "client starved by a busy sibling on its core")
    name = write_recipe(fwf, "starved-client", duration=8)
    core = min(os.sched_getaffinity(0))
    with no_processes_left(fwf), running_point(fwf, name, env={STALL_SHARE_ENV: str(CLIENT_STALL_SHARE)}) as p:
        aiperf = wait_until(lambda: _aiperf_running(p.pid), 60, "aiperf and its children")
        _benchmarking(fwf, name)
        _starve([aiperf, *aiperf.children(recursive=True)], core, 3.0)
        _, err = p.communicate(timeout=120)
    assert p.returncode == 0, err[-2000:]
    doc = json.loads((fwf / f"results/{name}/c2.json").read_text())
    bound = [m["reason"] for m in doc["marks"] if m["mark"] == "client-bound"]
    assert bound and "aiperf's event loop stalled" in bound[0] and "bound 5%" in bound[0], doc["figures"]["client"]
    f = doc["figures"]
    assert f["ttft_s"]["p95"] is None and "client-bound" in doc["unmeasured"]["ttft_s"]
    assert f["client"]["stall_warnings"] > 0 and f["client"]["e2e_output_tps_per_user"] > 0


def _starve(procs: list[psutil.Process], core: int, seconds: float) -> None:
    """``procs`` share ``core`` with a busy loop at nice -20 (its session's scheduler group: with
    autogroup a process's own nice only counts inside its session) for ``seconds``; then undone."""
    cores = sorted(os.sched_getaffinity(0))
    hog = subprocess.Popen(
        [sys.executable, "-c", "while True: pass"],
        preexec_fn=lambda: os.sched_setaffinity(0, {core}),
        start_new_session=True,
    )
    try:
        os.setpriority(os.PRIO_PROCESS, hog.pid, -20)
        group = Path(f"/proc/{hog.pid}/autogroup")  # with autogroup, the group's nice is what counts
        if group.exists():
            group.write_text("-20")
        for proc in procs:
            proc.cpu_affinity([core])
        since = time.monotonic()
        wait_until(lambda: time.monotonic() - since > seconds, seconds + 30, f"{seconds:g} s of a starved client")
    finally:
        hog.kill()
        hog.wait(timeout=30)
        for proc in procs:
            try:
                proc.cpu_affinity(cores)
            except psutil.NoSuchProcess:
                pass


def test_a_killed_driver_leaves_its_failure_record(fwf, reliability):
    """SIGKILL the point's driver (``servesweep run-point``, the process snakemake's shell started):
    the driver it forked writes failure.json naming SIGKILL and tears the stack down."""
    reliability("faults", "driver SIGKILLed mid-benchmark")
    name = write_recipe(fwf, "driver-killed", duration=30)
    record = fwf / f"logs/{name}/c2/failure.json"
    with no_processes_left(fwf), running_point(fwf, name) as p:
        wait_for_text(fwf / f"logs/{name}/c2/driver.log", "bench: aiperf")
        p.kill()
        wait_until(lambda: record.exists() and "SIGKILL" in record.read_text(), 60, "the failure record")
    reason = failure_reason(fwf, name, 2)
    assert f"interrupted by the SIGKILL of its supervisor process (servesweep run-point, pid {p.pid})" in reason
    assert "teardown:" in (fwf / f"logs/{name}/c2/driver.log").read_text()
    check_clean(fwf, f"results/{name}/c2.json")


def test_aiperf_errors_over_threshold(fwf, reliability):
    """A max model length shorter than most prompts: the engine rejects them, aiperf still exits 0."""
    reliability("faults", "errors over threshold")
    write_recipe(fwf, "many-errors", mutate=lambda d: d["engine"]["args"].extend(["--max-model-len", "600"]))
    with no_processes_left(fwf):
        r = snakemake(fwf, "results/many-errors/c2.json")
    assert r.returncode != 0
    reason = failure_reason(fwf, "many-errors", 2)
    assert "error rate" in reason and "is over the limit 5.0%" in reason
    assert (fwf / "logs/many-errors/c2/aiperf/profile_export_aiperf.json").exists()  # kept for the post-mortem
    check_clean(fwf, "results/many-errors/c2.json")


def _hold(port: int) -> socket.socket | None:
    """Hold ``port``; None when someone else (another suite on this host) already holds it."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(("127.0.0.1", port))
    except OSError:
        sock.close()
        return None
    sock.listen()
    return sock


def _ports_of_its_own(wf: Path, tmp: Path) -> dict:
    """A port range and slot locks no other test uses (tests run in parallel): 4 slots below the local
    profile's range; the env that points the drivers at the private lock directory."""
    facts = wf / "profiles/local/cluster.yaml"
    doc = yaml.safe_load(facts.read_text())
    doc.update(port_base=20480, port_slots=4)
    facts.write_text(yaml.safe_dump(doc, sort_keys=False))
    locks = tmp / "port-locks"
    locks.mkdir(mode=0o700)
    return {"SERVESWEEP_PORT_LOCKS": str(locks)}


def test_port_already_bound_is_avoided_or_reported(fwf, tmp_path, reliability):
    reliability("faults", "port already bound")
    env = _ports_of_its_own(fwf, tmp_path)
    name = write_recipe(fwf, "port-taken")
    plan = json.loads(plan_text(fwf, name))
    block, slots = plan["ports"]["block"], plan["ports"]["slots"]
    http = next(p for p in plan["processes"] if p["name"] == "frontend")["ports"]["http"]["port"]
    # leave one slot free: the last one whose port nobody on this host holds right now
    free = next(s for s in reversed(range(slots)) if port_free(http + s * block))
    held = []
    try:
        held += [_hold(http + s * block) for s in range(slots) if s != free]  # every other slot is taken
        with no_processes_left(fwf):
            r = snakemake(fwf, f"results/{name}/c2.json", "--config", "stack_reuse=0", env=env)
        assert r.returncode == 0, r.stdout[-3000:]
        log = (fwf / f"logs/{name}/c2/driver.log").read_text()
        assert f"port slot {free}," in log  # the only free slot (the search starts at a slot of its own)
        held.append(_hold(http + free * block))  # now every slot: a clear error, nothing started
        (fwf / f"results/{name}/c2.json").unlink()
        with no_processes_left(fwf):
            r = snakemake(fwf, f"results/{name}/c2.json", env=env)  # on a warm-stack keeper: same message
        assert r.returncode != 0
        assert "no free port slot" in failure_reason(fwf, name, 2)
        check_clean(fwf, f"results/{name}/c2.json")
    finally:
        for s in held:
            if s is not None:
                s.close()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_driver_interrupted_mid_point(fwf, reliability, sig):
    reliability("faults", f"driver {sig.name} mid-point")
    name = write_recipe(fwf, f"interrupt-{sig.name.lower()}", duration=30)
    with no_processes_left(fwf), running_point(fwf, name) as p:
        wait_for_text(fwf / f"logs/{name}/c2/driver.log", "bench: aiperf")
        p.send_signal(sig)
        _, err = p.communicate(timeout=60)
    assert p.returncode == 128 + sig
    assert f"interrupted by {sig.name}; tearing down" in err and "teardown:" in err
    check_clean(fwf, f"results/{name}/c2.json")


def test_snakemake_interrupted_and_restarted(fwf, reliability):
    reliability("faults", "snakemake interrupted + restart")
    write_recipe(fwf, "restart", conc=(2, 3), duration=5)
    with no_processes_left(fwf):
        assert snakemake(fwf, "results/restart/c2.json").returncode == 0  # one point already done
        env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ['PATH']}")
        sm = subprocess.Popen(
            [str(BIN / "snakemake"), "--profile", "profiles/local", "results/summary.md"],
            cwd=fwf, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, start_new_session=True,
        )  # fmt: skip
        try:
            wait_for_text(fwf / "logs/restart/c3/driver.log", "bench: aiperf")
            os.killpg(sm.pid, signal.SIGINT)  # Ctrl-C reaches the whole foreground group
            sm.communicate(timeout=90)
        finally:
            if sm.poll() is None:
                os.killpg(sm.pid, signal.SIGKILL)
                sm.communicate(timeout=30)
    assert sm.returncode != 0
    check_clean(fwf, "results/restart/c3.json")
    with no_processes_left(fwf):
        r = snakemake(fwf, "results/summary.md")
    assert r.returncode == 0, r.stdout[-3000:]
    out = r.stdout + r.stderr
    assert "output: results/restart/c3.json" in out and "output: results/restart/c2.json" not in out


def test_snakemake_killed_then_a_plain_rerun_works(fwf, reliability):
    """SIGKILL snakemake itself mid-point: its lock stays behind; the next plain run removes it (its
    owner is provably gone, run/stalelock), says so, and runs the point."""
    reliability("faults", "snakemake SIGKILLed + plain rerun")
    write_recipe(fwf, "sm-killed", duration=3)
    target = "results/sm-killed/c2.json"
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ['PATH']}")
    with no_processes_left(fwf):
        sm = subprocess.Popen(
            [str(BIN / "snakemake"), "--profile", "profiles/local", target],
            cwd=fwf, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, start_new_session=True,
        )  # fmt: skip
        try:
            wait_for_text(fwf / "logs/sm-killed/c2/driver.log", "bench: aiperf")
            sm.kill()
        finally:
            sm.wait(timeout=30)
    assert list((fwf / ".snakemake/locks").glob("*.lock"))  # what Snakemake itself would stop on
    with no_processes_left(fwf):
        r = snakemake(fwf, target)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    assert "servesweep: removed Snakemake's lock" in r.stderr and "is gone: it was killed" in r.stderr
    assert (fwf / target).exists()


def test_secrets_never_land_in_outputs_and_shell_strings_stay_verbatim(fwf, reliability):
    reliability("security", "secret env by reference")
    reliability("security", "shell metacharacters verbatim")
    secret = "hf_SECRET_9f8e7d6c5b4a"
    hostile = "a; touch PWNED1 $(touch PWNED2) `touch PWNED3` 'q\" \n second line | rm -rf /"

    def mutate(d):
        d["env"]["PROBE"] = hostile
        d["engine"]["env"] = {"PROBE_ARG": hostile, "HF_TOKEN": {"from_env": "HF_TOKEN", "secret": True}}

    name = write_recipe(fwf, "secretive", duration=6, mutate=mutate)
    with no_processes_left(fwf):
        with running_point(fwf, name, env={"HF_TOKEN": secret, "WANDB_API_KEY": secret}) as p:
            wait_for_text(fwf / f"logs/{name}/c2/driver.log", "bench: aiperf")
            procs = {k: " ".join(k.cmdline()) for k in descendants(p.pid)}
            workers = [k for k, cmd in procs.items() if "dynamo.mocker" in cmd]
            others = [k for k, cmd in procs.items() if "dynamo.frontend" in cmd or "aiperf" in cmd]
            assert workers and others
            for w in workers:
                env = w.environ()
                assert env["HF_TOKEN"] == secret  # resolved at run time for the process that names it
                assert env["PROBE"] == hostile and env["PROBE_ARG"] == hostile
                assert "WANDB_API_KEY" not in env  # an inherited credential no section names reaches no one
            for o in others:  # the frontend and aiperf name no secret: they get none
                assert secret not in " ".join(o.environ().values()), procs[o]
            out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err[-2000:]
        r = snakemake(fwf, "results/summary.md", env={"HF_TOKEN": secret})  # again through Snakemake
    assert r.returncode == 0, r.stdout[-2000:]
    for f in [
        *fwf.glob(".plans/**/*.json"),
        *fwf.glob("*.plan.json"),
        *fwf.glob("results/**/*"),
        *fwf.glob("logs/**/*.log"),
        *fwf.glob("logs/**/*.json"),
        *fwf.glob(".snakemake/log/*"),
    ]:
        if f.is_file():
            assert secret not in f.read_text(errors="replace"), f
    assert secret not in out + err + r.stdout + r.stderr
    assert not list(fwf.rglob("PWNED*")) and not list(Path.cwd().glob("PWNED*"))


def test_result_write_failure_keeps_the_measured_result(fwf, reliability):
    """Anything failing after the benchmark: the full result and aiperf's artifacts are kept, one clear
    message; a second failed attempt keeps its own beside the first, and the summary names both."""
    reliability("faults", "result cannot be written, twice")
    name = write_recipe(fwf, "unwritable", duration=3)
    (fwf / f"results/{name}/c2.json").mkdir(parents=True)  # a directory where the result file goes
    (fwf / f"{name}.plan.json").write_text(plan_text(fwf, name))
    runs = []
    for _ in range(2):
        with no_processes_left(fwf):
            runs.append(subprocess.run(
                [str(BIN / "servesweep"), "run-point", f"{name}.plan.json", f"results/{name}/c2.json"],
                cwd=fwf, capture_output=True, text=True, timeout=180,
            ))  # fmt: skip
    docs = []
    for r, run_dir in zip(runs, (f"logs/{name}/c2.attempt-1", f"logs/{name}/c2"), strict=True):
        assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr[-2000:]
        kept = fwf / run_dir / "result.unsaved.json"
        assert f"the full result is kept in {fwf / f'logs/{name}/c2'}/result.unsaved.json" in r.stderr
        docs.append(json.loads(kept.read_text()))
        assert docs[-1]["figures"]["requests_completed"] > 0
        assert (fwf / run_dir / "aiperf/profile_export_aiperf.json").exists()
    assert docs[0]["identity"]["end_time"] != docs[1]["identity"]["end_time"]  # two measurements
    point = {"recipe": name, "concurrency": 2, "result": f"results/{name}/c2.json", "log_dir": f"logs/{name}/c2"}
    ((_, _, reason, _),) = missing_points({"points": [point]}, set(), fwf)
    assert f"logs/{name}/c2/result.unsaved.json, logs/{name}/c2.attempt-1/result.unsaved.json" in reason


def test_concurrent_points_never_collide(fwf, reliability):
    """Four points from two recipes at once, twice over: no port or discovery collision."""
    write_recipe(fwf, "conc-a", conc=(2, 3), duration=5)

    def disagg(d):
        d["topology"] = {"disaggregated": {"prefill": {"workers": 1}, "decode": {"workers": 1}}}
        d["frontend"]["router"].pop("min_initial_workers", None)

    write_recipe(fwf, "conc-b", conc=(2, 3), duration=5, mutate=disagg)
    for rep in range(2):
        reliability("concurrency", f"4 points at once, round {rep + 1}")
        with no_processes_left(fwf):
            args = ["-F", "--cores", "8", "--resources", "point_slots=4", "--config", "stack_reuse=0"]
            r = snakemake(fwf, "results/summary.md", *args, timeout=600)  # 4 stacks at once
        assert r.returncode == 0, r.stdout[-3000:]
        held = []  # (port slot, start, end) of each point's stack
        for rec in ("conc-a", "conc-b"):
            for c in (2, 3):
                doc = json.loads((fwf / f"results/{rec}/c{c}.json").read_text())
                assert doc["figures"]["requests_completed"] > 0
                log = (fwf / f"logs/{rec}/c{c}/driver.log").read_text()
                ident = doc["identity"]
                held.append((int(log.split("port slot ")[1].split(",")[0]), ident["start_time"], ident["end_time"]))
        # a slot is reused only by a point that started after the last one on it ended (under load
        # the four points need not all overlap)
        for i, (slot, start, end) in enumerate(held):
            for other, o_start, o_end in held[i + 1 :]:
                assert slot != other or o_start >= end or start >= o_end, held

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

from conftest import BIN, ROOT, copy_workflow, snakemake
from test_local_sweep import stray_processes

pytestmark = pytest.mark.integration
BASE = yaml.safe_load((ROOT / "recipes" / "local-agg-2x-mocker.yaml").read_text())


def write_recipe(wf: Path, name: str, conc=(2,), duration=5, mutate=None, **readiness) -> str:
    doc = json.loads(json.dumps(BASE))
    doc["name"] = name
    doc["concurrency"] = list(conc)
    doc["scenario"]["duration_s"] = duration
    doc["scenario"]["warmup"] = {"requests": 2}
    if readiness:
        doc["readiness"] = readiness
    if mutate:
        mutate(doc)
    (wf / "recipes" / f"{name}.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    return name


@pytest.fixture
def fwf(tmp_path):
    return copy_workflow(tmp_path / "wf", recipes=[])


def no_half_written(wf: Path) -> bool:
    return not [p for p in wf.glob("results/**/*") if p.name.startswith(".") or p.suffix == ".tmp"]


def check_clean(wf: Path, since: float, *missing: str):
    for m in missing:
        assert not (wf / m).exists(), m
    assert no_half_written(wf)
    deadline = time.monotonic() + 10
    while stray_processes(since) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert stray_processes(since) == []


def plan_text(wf: Path, name: str) -> str:
    cmd = [sys.executable, "-m", "servesweep", "plan", f"recipes/{name}.yaml"]
    return subprocess.run(cmd, cwd=wf, capture_output=True, text=True, check=True).stdout


def failure_reason(wf: Path, recipe: str, conc: int) -> str:
    return json.loads((wf / f"logs/{recipe}/c{conc}/failure.json").read_text())["reason"]


def test_engine_exits_during_startup(fwf, reliability):
    reliability("faults", "engine exits during startup")
    write_recipe(fwf, "ok-point")
    write_recipe(fwf, "bad-engine", mutate=lambda d: d["engine"]["args"].extend(["--max-num-seqs", "many"]))
    since = time.time()
    r = snakemake(fwf, "results/summary.md", "--keep-going")
    assert r.returncode != 0
    reason = failure_reason(fwf, "bad-engine", 2)
    assert "process agg-0 exited with code 2 during startup" in reason or "agg-1 exited with code 2" in reason
    assert "invalid int value: 'many'" in reason  # the log tail names the cause
    check_clean(fwf, since, "results/bad-engine/c2.json")
    assert (fwf / "results/ok-point/c2.json").exists()
    # fix the recipe: the rerun runs only the missing point
    write_recipe(fwf, "bad-engine")
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
    since = time.time()
    r = snakemake(fwf, "results/slow-engine/c2.json")
    assert r.returncode != 0
    reason = failure_reason(fwf, "slow-engine", 2)
    assert "stack not ready after 6 s" in reason
    check_clean(fwf, since, "results/slow-engine/c2.json")


def test_frontend_never_reaches_expected_workers(fwf, reliability):
    """The plan expects 3 backend registrations; the stack only ever has 2."""
    reliability("faults", "frontend short of workers")
    name = write_recipe(fwf, "short-workers", timeout_s=6)
    plan = json.loads(plan_text(fwf, name))
    plan["expect_registrations"] = {"backend": 3}
    (fwf / "plan.json").write_text(json.dumps(plan))
    since = time.time()
    r = subprocess.run(
        [str(BIN / "servesweep"), "run-point", "plan.json", "results/short/c2.json"],
        cwd=fwf,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 1
    assert "frontend registrations {'backend': 2} of {'backend': 3}" in r.stderr
    check_clean(fwf, since, "results/short/c2.json")


def _wait_for(path: Path, text: str, timeout=120):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and text in path.read_text():
            return
        time.sleep(0.2)
    raise AssertionError(f"{text!r} never appeared in {path}")


def _stack(driver_pid: int, match: str) -> list[psutil.Process]:
    try:
        kids = psutil.Process(driver_pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []
    return [k for k in kids if match in " ".join(k.cmdline())]


def _start_point(wf: Path, name: str, env=None):
    (wf / f"{name}.plan.json").write_text(plan_text(wf, name))
    return subprocess.Popen(
        [str(BIN / "servesweep"), "run-point", f"{name}.plan.json", f"results/{name}/c2.json"],
        cwd=wf,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ, **(env or {})),
    )


def _kill_mid_bench(fwf: Path, name: str, pick) -> str:
    """Start a point, kill the process `pick` chooses once the benchmark runs; return the driver's stderr."""
    p = _start_point(fwf, name)
    _wait_for(fwf / f"logs/{name}/c2/driver.log", "bench: aiperf")
    time.sleep(1)
    victims = pick(p.pid)
    assert victims
    victims[0].kill()
    _, err = p.communicate(timeout=60)
    assert p.returncode == 1
    return err


def test_engine_dies_mid_benchmark(fwf, reliability):
    reliability("faults", "engine dies mid-benchmark")
    name = write_recipe(fwf, "dies-mid", duration=30)
    since = time.time()

    def second_replica(pid):
        return [k for k in _stack(pid, "dynamo.mocker") if k.environ().get("CUDA_VISIBLE_DEVICES") == "1"]

    err = _kill_mid_bench(fwf, name, second_replica)
    assert "process agg-1 exited with code -9 mid-benchmark" in err
    check_clean(fwf, since, f"results/{name}/c2.json")


def test_aiperf_crash(fwf, reliability):
    reliability("faults", "aiperf crashes")
    name = write_recipe(fwf, "aiperf-crash", duration=30)
    since = time.time()
    err = _kill_mid_bench(fwf, name, lambda pid: _stack(pid, "aiperf profile"))
    assert "aiperf exited with code -9" in err
    check_clean(fwf, since, f"results/{name}/c2.json")


def test_aiperf_errors_over_threshold(fwf, reliability):
    """A max model length shorter than most prompts: the engine rejects them, aiperf still exits 0."""
    reliability("faults", "errors over threshold")
    write_recipe(fwf, "many-errors", mutate=lambda d: d["engine"]["args"].extend(["--max-model-len", "600"]))
    since = time.time()
    r = snakemake(fwf, "results/many-errors/c2.json")
    assert r.returncode != 0
    reason = failure_reason(fwf, "many-errors", 2)
    assert "error rate" in reason and "is over the limit 5.0%" in reason
    assert (fwf / "logs/many-errors/c2/aiperf/profile_export_aiperf.json").exists()  # kept for the post-mortem
    check_clean(fwf, since, "results/many-errors/c2.json")


def test_port_already_bound_is_avoided_or_reported(fwf, reliability):
    reliability("faults", "port already bound")
    name = write_recipe(fwf, "port-taken")
    plan = json.loads(plan_text(fwf, name))
    block, slots = plan["ports"]["block"], plan["ports"]["slots"]
    http = plan["processes"][0]["ports"]["http"]["port"]
    held = []
    try:
        for s in range(slots - 1):  # every slot but the last has its frontend port taken
            sock = socket.socket()
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(("127.0.0.1", http + s * block))
            sock.listen()
            held.append(sock)
        since = time.time()
        r = snakemake(fwf, f"results/{name}/c2.json")
        assert r.returncode == 0, r.stdout[-3000:]
        log = (fwf / f"logs/{name}/c2/driver.log").read_text()
        assert "already bound by another program" in log and f"port slot {slots - 1}" in log
        # now every slot is taken: a clear error, nothing started
        last = socket.socket()
        last.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        last.bind(("127.0.0.1", http + (slots - 1) * block))
        last.listen()
        held.append(last)
        (fwf / f"results/{name}/c2.json").unlink()
        r = snakemake(fwf, f"results/{name}/c2.json")
        assert r.returncode != 0
        assert "no free port slot" in failure_reason(fwf, name, 2)
        check_clean(fwf, since, f"results/{name}/c2.json")
    finally:
        for s in held:
            s.close()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_driver_interrupted_mid_point(fwf, reliability, sig):
    reliability("faults", f"driver {sig.name} mid-point")
    name = write_recipe(fwf, f"interrupt-{sig.name.lower()}", duration=30)
    since = time.time()
    p = _start_point(fwf, name)
    _wait_for(fwf / f"logs/{name}/c2/driver.log", "bench: aiperf")
    p.send_signal(sig)
    _, err = p.communicate(timeout=60)
    assert p.returncode == 128 + sig
    assert f"interrupted by {sig.name}; tearing down" in err and "teardown:" in err
    check_clean(fwf, since, f"results/{name}/c2.json")


def test_snakemake_interrupted_and_restarted(fwf, reliability):
    reliability("faults", "snakemake interrupted + restart")
    write_recipe(fwf, "restart", conc=(2, 3), duration=8)
    assert snakemake(fwf, "results/restart/c2.json").returncode == 0  # one point already done
    since = time.time()
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ['PATH']}")
    sm = subprocess.Popen(
        [str(BIN / "snakemake"), "--profile", "profiles/local", "results/summary.md"],
        cwd=fwf,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        start_new_session=True,
    )
    _wait_for(fwf / "logs/restart/c3/driver.log", "bench: aiperf")
    os.killpg(sm.pid, signal.SIGINT)  # Ctrl-C reaches the whole foreground group
    sm.communicate(timeout=90)
    assert sm.returncode != 0
    check_clean(fwf, since, "results/restart/c3.json")
    r = snakemake(fwf, "results/summary.md")
    assert r.returncode == 0, r.stdout[-3000:]
    out = r.stdout + r.stderr
    assert "output: results/restart/c3.json" in out and "output: results/restart/c2.json" not in out
    check_clean(fwf, since)


def test_secrets_never_land_in_outputs_and_shell_strings_stay_verbatim(fwf, reliability):
    reliability("security", "secret env by reference")
    reliability("security", "shell metacharacters verbatim")
    secret = "hf_SECRET_9f8e7d6c5b4a"
    hostile = "a; touch PWNED1 $(touch PWNED2) `touch PWNED3` 'q\" \n second line | rm -rf /"

    def mutate(d):
        d["env"]["HF_TOKEN"] = {"from_env": "HF_TOKEN", "secret": True}
        d["env"]["PROBE"] = hostile
        d["engine"]["env"] = {"PROBE_ARG": hostile}

    name = write_recipe(fwf, "secretive", duration=20, mutate=mutate)
    since = time.time()
    p = _start_point(fwf, name, env={"HF_TOKEN": secret})
    _wait_for(fwf / f"logs/{name}/c2/driver.log", "bench: aiperf")
    workers = _stack(p.pid, "dynamo.mocker")
    assert workers
    for w in workers:
        env = w.environ()
        assert env["HF_TOKEN"] == secret  # resolved at run time for the process
        assert env["PROBE"] == hostile and env["PROBE_ARG"] == hostile
    out, err = p.communicate(timeout=120)
    assert p.returncode == 0, err[-2000:]
    r = snakemake(fwf, "results/summary.md", env={"HF_TOKEN": secret})  # again through Snakemake
    assert r.returncode == 0, r.stdout[-2000:]
    for f in [
        *fwf.glob(".plans/**/*.json"),
        *fwf.glob("results/**/*"),
        *fwf.glob("logs/**/*.log"),
        *fwf.glob("logs/**/*.json"),
        *fwf.glob(".snakemake/log/*"),
    ]:
        if f.is_file():
            assert secret not in f.read_text(errors="replace"), f
    assert secret not in out + err + r.stdout + r.stderr
    assert not list(fwf.rglob("PWNED*")) and not list(Path.cwd().glob("PWNED*"))
    check_clean(fwf, since)


def test_concurrent_points_never_collide(fwf, reliability):
    """Four points from two recipes at once, three times over: no port or discovery collision."""
    write_recipe(fwf, "conc-a", conc=(2, 3), duration=5)

    def disagg(d):
        d["topology"] = {"disaggregated": {"prefill": {"workers": 1}, "decode": {"workers": 1}}}
        d["frontend"]["router"].pop("min_initial_workers", None)

    write_recipe(fwf, "conc-b", conc=(2, 3), duration=5, mutate=disagg)
    for rep in range(3):
        reliability("concurrency", f"4 points at once, round {rep + 1}")
        since = time.time()
        r = snakemake(fwf, "results/summary.md", "-F", "--cores", "8", "--resources", "point_slots=4", timeout=600)
        assert r.returncode == 0, r.stdout[-3000:]
        slots = []
        for rec in ("conc-a", "conc-b"):
            for c in (2, 3):
                doc = json.loads((fwf / f"results/{rec}/c{c}.json").read_text())
                assert doc["figures"]["requests_completed"] > 0
                log = (fwf / f"logs/{rec}/c{c}/driver.log").read_text()
                slots.append(int(log.split("port slot ")[1].split(",")[0]))
        assert len(set(slots)) == 4, slots
        check_clean(fwf, since)

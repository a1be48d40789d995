"""Every helper the tests share (test modules import from here, never from each other)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import psutil
import yaml

from servesweep.render.cluster import all_clusters
from servesweep.render.loading import load_recipe, load_recipes
from servesweep.render.plan import render
from servesweep.tools import workcopy

ROOT = Path(__file__).resolve().parents[1]
BIN = workcopy.BIN
LOCAL_RECIPES = ["local-agg-2x-mocker", "local-disagg-1p1d-mocker"]
CLUSTERS = all_clusters(ROOT / "profiles")
SWEPT = yaml.safe_load((ROOT / "recipes" / "local-tune-mocker.yaml").read_text())  # the local sweep


def load_sweep(tmp_path, sweep: dict, **changes):
    """local-tune-mocker with this sweep (and top-level changes), loaded from tmp_path/recipes."""
    doc = dict(SWEPT, sweep=sweep, **changes)
    f = tmp_path / "recipes" / f"{doc['name']}.yaml"
    f.parent.mkdir(exist_ok=True)
    f.write_text(yaml.safe_dump(doc, sort_keys=False))
    return load_recipes([f], CLUSTERS, root=tmp_path)


def sweep_problems(tmp_path, sweep: dict, **changes) -> list[str]:
    recipes, problems = load_sweep(tmp_path, sweep, **changes)
    assert problems, [r.name for r in recipes]
    return [f"{p.file}: {p.field}: {p.reason}" for p in problems]


# what a stack's driver makes at start (run/credentials), as stand-in values for plans resolved in tests
STACK_CREDENTIALS = {"nats_password": "n-test", "tls_ca_pem": "CA", "tls_cert_pem": "CERT", "tls_key_pem": "KEY"}
ETCD_TLS_ENV = {"ETCD_AUTH_CA", "ETCD_AUTH_CLIENT_CERT", "ETCD_AUTH_CLIENT_KEY"}
RELIABILITY: dict[str, list[tuple[str, bool]]] = {}  # category -> (case, passed), printed at the end
STACK_PROGRAMS = (
    "dynamo.mocker", "dynamo.frontend", "aiperf", "servesweep run-point", "servesweep.run.standin",
    "/usr/bin/etcd", "nats-server", "nginx: ", "servesweep keep-stack",
    "vllm.entrypoints", "VLLM::", "from multiprocessing", "sglang.launch_server", "mooncake_master",
    "run/sysguard.py", "nginx", "tools/dcgm_standin.py",
)  # fmt: skip


# Opting out of tests the machine cannot run: SERVESWEEP_SKIP=slurm,root (a comma list). Without it a
# missing prerequisite fails the test, naming what did not run; with it the test is skipped with that
# reason, and pytest's closing lines count the skips and say why (-ra).
SKIP_ENV = "SERVESWEEP_SKIP"


def require(prerequisite: str, missing: str | None) -> None:
    """Fail (or, opted out, skip) when ``missing`` says why the machine lacks ``prerequisite``."""
    import pytest

    if not missing:
        return
    opted_out = prerequisite in os.environ.get(SKIP_ENV, "").split(",")
    message = f"{prerequisite} tests did not run: {missing}"
    if opted_out:
        pytest.skip(f"{message} ({SKIP_ENV} opts out)")
    pytest.fail(f"{message}; to run without them, set {SKIP_ENV}={prerequisite}", pytrace=False)


def copy_workflow(dest: Path, recipes: list[str] | None = None) -> Path:
    return workcopy.copy_workflow(ROOT, dest, recipes)


snakemake = workcopy.snakemake


def servesweep(*args: str, cwd: Path = ROOT, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "servesweep", *args], cwd=cwd, capture_output=True, text=True, timeout=timeout
    )


def plan_of(name: str, conc: int | None = None, cluster: str | None = None, rehearsal: bool = False) -> dict:
    r = load_recipe(ROOT / "recipes" / f"{name}.yaml")
    c = CLUSTERS[cluster or r.clusters[0]]
    return render(r, c, conc or r.concurrency[0], CLUSTERS["local"] if rehearsal else None)


def wait_until(condition, timeout: float, what: str, every: float = 0.1):
    """Poll ``condition`` until it returns something truthy; fail naming ``what`` at the deadline."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def wait_for_text(path: Path, text: str, timeout: float = 120) -> None:
    wait_until(lambda: path.exists() and text in path.read_text(), timeout, f"{text!r} in {path}")


def stray_processes(since: float, root: Path) -> list[str]:
    """Stack, aiperf or driver processes started after `since` from a workflow under `root`, still
    alive. Scoped by working directory: another test run on the machine is never counted (or killed)."""
    out, root = [], Path(root).resolve()
    for p in psutil.process_iter(["pid", "cmdline", "create_time", "status", "cwd"]):
        try:
            cmd = " ".join(p.info["cmdline"] or [])
            if p.info["create_time"] < since - 1 or p.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            if any(k in cmd for k in STACK_PROGRAMS) and Path(p.info["cwd"] or "/").is_relative_to(root):
                out.append(f"{p.info['pid']}: {cmd[:120]}")
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return out


def kill_strays(since: float, root: Path) -> list[str]:
    """SIGKILL whatever a test left running (so one failure never cascades); return what it was."""
    left = stray_processes(since, root)
    for line in left:
        try:
            os.kill(int(line.split(":")[0]), signal.SIGKILL)
        except ProcessLookupError:
            pass
    return left


def assert_no_strays(since: float, root: Path, timeout: float = 15) -> None:
    """Nothing of a stack survives: wait a bounded time for teardown, then check the whole table."""
    try:
        wait_until(lambda: not stray_processes(since, root), timeout, "every stack process to exit")
    except AssertionError:
        left = kill_strays(since, root)
        raise AssertionError(f"processes left running: {left}") from None


@contextmanager
def no_processes_left(root: Path):
    """Around a test body that starts stacks in the workflow under `root`: afterwards (also after a
    failed assertion) nothing is left."""
    since = time.time()
    try:
        yield since
    except BaseException:
        kill_strays(since, root)
        raise
    assert_no_strays(since, root)


@contextmanager
def running_point(wf: Path, name: str, env: dict | None = None):
    """A driver running one point of recipe ``name`` (its plan rendered into the workflow); it is
    stopped on exit from the block whatever happened, its whole process tree included."""
    (wf / f"{name}.plan.json").write_text(plan_text(wf, name))
    p = subprocess.Popen(
        [str(BIN / "servesweep"), "run-point", f"{name}.plan.json", f"results/{name}/c2.json"],
        cwd=wf, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=dict(os.environ, **(env or {})), start_new_session=True,
    )  # fmt: skip
    try:
        yield p
    finally:
        if p.poll() is None:
            tree = psutil.Process(p.pid).children(recursive=True)
            p.kill()
            for c in tree:
                try:
                    c.kill()
                except psutil.NoSuchProcess:
                    pass
        p.communicate(timeout=30)


def plan_text(wf: Path, name: str) -> str:
    cmd = [sys.executable, "-m", "servesweep", "plan", f"recipes/{name}.yaml"]
    return subprocess.run(cmd, cwd=wf, capture_output=True, text=True, check=True).stdout


def descendants(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def write_recipe(wf: Path, base: dict, name: str, conc=(2,), duration=5, mutate=None, **readiness) -> str:
    doc = json.loads(json.dumps(base))
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


def stack_logs(wf: Path, result: str) -> Path:
    """The directory with the process logs of the stack a result ran on (a warm stack's own
    directory, or the point's log dir for a stack of its own)."""
    ident = json.loads((wf / result).read_text())["identity"]
    logs = wf / "logs" / ("rehearsal" if ident["rehearsal"] else "")
    sid = ident["stack"]["id"]
    if sid.startswith("solo-"):
        return logs / ident["recipe"] / f"c{ident['point']}"
    return stack_dir(wf, sid, ident["rehearsal"])


def stack_dir(wf: Path, sid: str, rehearsal: bool = False) -> Path:
    """A warm stack's directory (under its server identity's stacks, ``paths.stacks_dir``)."""
    (d,) = (wf / "logs" / ("rehearsal" if rehearsal else "") / "stacks").glob(f"*/{sid}")
    return d


def stack_driver_log(logs: Path) -> str:
    """What the stack's driver said (startup, readiness, teardown)."""
    keeper = logs / "keeper-driver.log"
    return (keeper if keeper.exists() else logs / "driver.log").read_text()

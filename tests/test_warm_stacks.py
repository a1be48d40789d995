"""One engine start per server identity, locally: the stale points of a recipe, and of every recipe
with the same servers, share one warm stack."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
from pathlib import Path

import psutil
import pytest
import yaml

from helpers import BIN, ROOT, copy_workflow, no_processes_left, snakemake, stack_dir, wait_for_text, wait_until
from helpers import write_recipe as _write_recipe

pytestmark = pytest.mark.integration
BASE = yaml.safe_load((ROOT / "recipes" / "local-agg-2x-mocker.yaml").read_text())
NAME = "curve"


@pytest.fixture
def cwf(tmp_path):
    wf = copy_workflow(tmp_path / "wf", recipes=[])
    _write_recipe(wf, BASE, NAME, conc=(2, 3, 4), duration=5)
    return wf


def stacks(wf: Path) -> dict[int, dict]:
    out = {}
    for c in (2, 3, 4):
        f = wf / f"results/{NAME}/c{c}.json"
        if f.exists():
            out[c] = json.loads(f.read_text())["identity"]["stack"]
    return out


def ran(r: subprocess.CompletedProcess) -> set[str]:
    return set(re.findall(r"output: (results/[^,\s]+/c\d+\.json)", r.stdout + r.stderr))


def test_a_curve_runs_on_one_stack_and_a_deleted_point_on_a_fresh_one(cwf):
    with no_processes_left(cwf):
        r = snakemake(cwf, "results/summary.md", timeout=600)
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    s = stacks(cwf)
    assert len({v["id"] for v in s.values()}) == 1, s
    assert [s[c]["position"] for c in (2, 3, 4)] == [1, 2, 3]
    assert s[2]["caches_reset"] is False and s[3]["caches_reset"] is None and s[3]["caches_reset_note"]
    out = r.stdout + r.stderr
    # 3 points and the recipe's eval: one start, three joins
    assert out.count("stack: starting stack") == 1 and out.count("stack: joining warm stack") == 3
    (stack_dir,) = [d for d in (cwf / "logs/stacks").glob("*/*") if d.is_dir()]
    keeper_log = (stack_dir / "keeper-driver.log").read_text()
    assert keeper_log.count("ready: ") >= 1 and "all 4 expected point(s) done" in keeper_log
    assert "teardown:" in keeper_log
    # the middle point deleted: exactly it reruns, on a fresh stack of its own
    (cwf / f"results/{NAME}/c3.json").unlink()
    with no_processes_left(cwf):
        r = snakemake(cwf, "results/summary.md", timeout=600)
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    assert ran(r) == {f"results/{NAME}/c3.json"}
    s2 = stacks(cwf)
    assert s2[3]["id"] != s[2]["id"] and s2[3]["position"] == 1
    assert s2[2] == s[2] and s2[4] == s[4]


def _keeper_children(wf: Path) -> list[psutil.Process]:
    (current,) = (wf / "logs/stacks").glob("*/current.json")
    cur = json.loads(current.read_text())
    return psutil.Process(cur["keeper"]).children()


def test_a_dead_engine_fails_the_rest_of_the_curve_and_a_rerun_completes_it(cwf):
    _write_recipe(cwf, BASE, NAME, conc=(2, 3, 4), duration=20)
    rc, _out = _hurt_agg1_during_c3(cwf, ["results/summary.md"], lambda p: p.kill())
    assert rc != 0
    assert (cwf / f"results/{NAME}/c2.json").exists()
    for c in (3, 4):
        assert not (cwf / f"results/{NAME}/c{c}.json").exists()
        reason = json.loads((cwf / f"logs/{NAME}/c{c}/failure.json").read_text())["reason"]
        assert "process agg-1 exited with code -9" in reason and "while point c3 was running" in reason, reason
    with no_processes_left(cwf):
        r = snakemake(cwf, "results/summary.md", timeout=600)
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    assert ran(r) == {f"results/{NAME}/c3.json", f"results/{NAME}/c4.json"}
    s = stacks(cwf)
    assert s[3]["id"] == s[4]["id"] != s[2]["id"] and [s[3]["position"], s[4]["position"]] == [1, 2]


def _hurt_agg1_during_c3(wf: Path, targets: list[str], hurt) -> tuple[int, str]:
    """Run snakemake (--keep-going) on the targets; once point c3's benchmark runs, ``hurt`` the
    stack's agg-1 process (kill, suspend). A suspended process is resumed whatever happens."""
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ['PATH']}")
    cmd = [str(BIN / "snakemake"), "--profile", "profiles/local", *targets, "--keep-going"]
    victim = None
    with no_processes_left(wf):
        sm = subprocess.Popen(
            cmd, cwd=wf, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, start_new_session=True
        )
        try:
            wait_for_text(wf / f"logs/{NAME}/c3/driver.log", "bench: aiperf", timeout=300)
            victim = wait_until(
                lambda: next((p for p in _keeper_children(wf) if "agg-1" in _log_of(p)), None), 30, "agg-1"
            )
            hurt(victim)
            out, _ = sm.communicate(timeout=300)
        finally:
            if victim is not None:
                with contextlib.suppress(psutil.Error):
                    victim.resume()
            if sm.poll() is None:
                os.killpg(sm.pid, signal.SIGKILL)
                sm.communicate(timeout=30)
    return sm.returncode, out


def _log_of(p: psutil.Process) -> str:
    """Which stack process this is: its stdout is its log file in the stack dir."""
    try:
        return os.readlink(f"/proc/{p.pid}/fd/1")
    except OSError:
        return ""


def test_reuse_off_runs_one_stack_per_point(cwf):
    with no_processes_left(cwf):
        r = snakemake(cwf, f"results/{NAME}/c2.json", f"results/{NAME}/c3.json", "--config", "stack_reuse=0")
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    s = stacks(cwf)
    assert s[2]["id"] != s[3]["id"] and s[2]["position"] == s[3]["position"] == 1
    assert "stack: starting stack" not in r.stdout + r.stderr


def test_recipes_that_differ_only_in_the_scenario_share_one_stack(cwf):
    """A second recipe with the same servers and another scenario: its points run on the curve's
    stack after the curve's, one engine start in all; the caches its first point meets were warmed
    by the other scenario, and its result says so."""

    def other_scenario(doc):
        doc["scenario"]["name"] = "local-synthetic"
        doc["scenario"]["dataset"] = {"synthetic": {"isl": 64, "osl": 8, "entries": 40}}
        doc["scenario"].pop("session_header", None)

    _write_recipe(cwf, BASE, "curve-synthetic", conc=(2, 5), duration=4, mutate=other_scenario)
    with no_processes_left(cwf):
        r = snakemake(cwf, "results/summary.md", timeout=600)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-4000:]
    docs = {f: json.loads(f.read_text())["identity"] for f in cwf.glob("results/curve*/c*.json")}
    assert len(docs) == 5
    assert len({d["stack"]["id"] for d in docs.values()}) == 1, docs
    # 5 points and the two recipes' evals: one start, six joins
    assert out.count("stack: starting stack") == 1 and out.count("stack: joining warm stack") == 6
    order = sorted(docs.values(), key=lambda d: d["stack"]["position"])
    assert [(d["recipe"], d["point"]) for d in order] == [
        ("curve", 2), ("curve", 3), ("curve", 4), ("curve-synthetic", 2), ("curve-synthetic", 5)
    ]  # fmt: skip
    assert order[3]["stack"]["caches_reset"] is None and order[3]["stack"]["caches_reset_note"]
    keeper = (stack_dir(cwf, order[0]["stack"]["id"]) / "keeper-driver.log").read_text()
    assert len(re.findall(r"\] starting \d+ processes", keeper)) == 1 and "all 7 expected point(s) done" in keeper
    md = (cwf / "results/summary.md").read_text()
    assert "curve, curve-synthetic" in md and "‡ cross-scenario reuse without a prefix-cache reset" in md


def _keeper_of(wf: Path, sid: str) -> int:
    return json.loads((stack_dir(wf, sid) / "state.json").read_text())["keeper"]


def test_a_lingering_stack_is_joined_by_the_next_run_and_ends_after_its_linger(cwf):
    """--config linger_s keeps the stack after the run's last point: the next snakemake's point joins
    it (no engine start), and it stops once it has been idle for the linger."""
    with no_processes_left(cwf):
        first = snakemake(cwf, f"results/{NAME}/c2.json", "--config", "linger_s=20")
        assert first.returncode == 0, (first.stdout + first.stderr)[-4000:]
        sid = stacks(cwf)[2]["id"]
        keeper = _keeper_of(cwf, sid)
        assert psutil.pid_exists(keeper)  # the run is over; its stack lingers
        second = snakemake(cwf, f"results/{NAME}/c3.json", "--config", "linger_s=20")
        assert second.returncode == 0, (second.stdout + second.stderr)[-4000:]
        out = second.stdout + second.stderr
        assert "stack: starting stack" not in out and "stack: joining warm stack" in out
        s = stacks(cwf)
        assert s[3]["id"] == sid and s[3]["position"] == 2
        wait_until(lambda: not psutil.pid_exists(keeper), 20 + 30, "the lingering keeper to stop")
    log = (stack_dir(cwf, sid) / "keeper-driver.log").read_text()
    assert len(re.findall(r"\] starting \d+ processes", log)) == 1
    assert "all 1 expected point(s) done, then lingered 20 s" in log, log


def test_without_a_linger_the_next_run_starts_its_own_stack(cwf):
    with no_processes_left(cwf):
        first = snakemake(cwf, f"results/{NAME}/c2.json")
        second = snakemake(cwf, f"results/{NAME}/c3.json")
    assert first.returncode == 0 and second.returncode == 0, (second.stdout + second.stderr)[-4000:]
    s = stacks(cwf)
    assert s[2]["id"] != s[3]["id"] and s[3]["position"] == 1


def test_a_worker_whose_registration_lapses_ends_the_stack(cwf):
    """A worker that stands still (here SIGSTOPped) is alive but serves nothing, and past the discovery
    TTL (10 s) Dynamo never registers it again: the stack dies naming it, the curve's later points fail
    at once; a rerun completes them."""
    _write_recipe(cwf, BASE, NAME, conc=(2, 3, 4), duration=30)
    rc, out = _hurt_agg1_during_c3(cwf, [f"results/{NAME}/c3.json", f"results/{NAME}/c4.json"], lambda p: p.suspend())
    assert rc != 0, out[-3000:]
    for c in (3, 4):
        assert not (cwf / f"results/{NAME}/c{c}.json").exists()
        reason = json.loads((cwf / f"logs/{NAME}/c{c}/failure.json").read_text())["reason"]
        # the stopped worker is named: by the point's watch (run/watch) or the keeper's, or as the cause
        # behind the registration its stop let lapse, whichever bound runs out first
        assert "agg-1 (role agg, index 1, pid" in reason and "is stopped" in reason, reason
        assert c == 3 or "the stack" in reason and "died" in reason, reason  # c4 fails at once on the dead stack
    with no_processes_left(cwf):
        r = snakemake(cwf, f"results/{NAME}/c3.json", f"results/{NAME}/c4.json", timeout=600)
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    s = stacks(cwf)
    assert s[3]["id"] == s[4]["id"] and [s[3]["position"], s[4]["position"]] == [1, 2]

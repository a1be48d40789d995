"""A real local sweep: Dynamo frontend + KV router + dynamo.mocker workers, driven by the real aiperf."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time

import psutil
import pytest
import yaml

from servesweep.run.result import validate_result

from helpers import (
    BIN,
    LOCAL_RECIPES,
    ROOT,
    assert_no_strays,
    copy_workflow,
    kill_strays,
    no_processes_left,
    snakemake,
    stack_driver_log,
    stack_logs,
    wait_until,
    write_recipe,
)

pytestmark = pytest.mark.integration


def shorten(wf, duration=6, conc="[2, 8]"):
    for name in LOCAL_RECIPES:
        f = wf / "recipes" / f"{name}.yaml"
        text = f.read_text().replace("duration_s: 20", f"duration_s: {duration}")
        f.write_text(text.replace("concurrency: [4, 16]", f"concurrency: {conc}"))


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    wf = copy_workflow(tmp_path_factory.mktemp("sweep") / "wf", LOCAL_RECIPES)
    shorten(wf)
    since = time.time()
    try:
        r = snakemake(wf, "results/summary.md", timeout=900)
        yield wf, r, since
    finally:
        kill_strays(since, wf)


def results_of(wf):
    return {p.relative_to(wf).as_posix(): json.loads(p.read_text()) for p in sorted(wf.glob("results/*/c*.json"))}


def test_sweep_succeeds_and_writes_every_point(sweep):
    wf, r, _ = sweep
    assert r.returncode == 0, r.stderr[-4000:]
    assert set(results_of(wf)) == {f"results/{n}/c{c}.json" for n in LOCAL_RECIPES for c in (2, 8)}
    assert (wf / "results" / "summary.md").exists() and (wf / "results" / "summary.csv").exists()
    # progress was visible: readiness and benchmark lines from the driver
    out = r.stdout + r.stderr
    assert "ready: " in out and "bench: aiperf at concurrency" in out


def test_each_curve_ran_on_one_warm_stack(sweep):
    """2 recipes x 2 concurrencies: 2 engine starts, not 4."""
    wf, r, _ = sweep
    ids = {n: {json.loads((wf / f"results/{n}/c{c}.json").read_text())["identity"]["stack"]["id"] for c in (2, 8)}
           for n in LOCAL_RECIPES}  # fmt: skip
    assert all(len(v) == 1 for v in ids.values()) and len(set().union(*ids.values())) == 2, ids
    assert (r.stdout + r.stderr).count("stack: starting stack") == 2


def test_results_validate_and_agree_with_aiperf(sweep):
    wf, _, _ = sweep
    for path, doc in results_of(wf).items():
        assert validate_result(doc) == [], path
        export = json.loads((wf / doc["artifacts"] / "profile_export_aiperf.json").read_text())
        f = doc["figures"]
        assert f["requests_completed"] == export["request_count"]["avg"]
        assert f["requests_completed"] > 0 and f["output_tokens_total"] > 0
        assert f["ttft_s"]["p95"] == pytest.approx(export["time_to_first_token"]["p95"] / 1000)
        assert f["itl_ms"]["p99"] == pytest.approx(export["inter_token_latency"]["p99"])
        assert f["output_tps"] == pytest.approx(export["output_token_throughput"]["avg"])
        assert f["request_throughput"] == pytest.approx(export["request_throughput"]["avg"])
        assert doc["identity"]["tools"]["aiperf"] == export["aiperf_version"]
        assert doc["identity"]["plan_fingerprint"] and "slo" not in doc  # verdicts are the summary's
        assert doc["identity"]["discovery"] == "file"


def test_requests_per_worker_add_up(sweep):
    """Worker counters over the aiperf run = completed + failed: the 8 warm-up requests of the recipes are
    never counted (run/window), nor the smoke request."""
    wf, _, _ = sweep
    for path, doc in results_of(wf).items():
        f = doc["figures"]
        expected = f["requests_completed"] + f["requests_errored"]
        assert "warm-up excluded" in doc["counting"]["requests_per_worker"], doc["counting"]
        per = f["requests_per_worker"]
        if "local-agg" in path:
            assert set(per) == {"agg-0", "agg-1"}
            assert sum(per.values()) == expected, (path, per, expected)
            assert min(per.values()) > 0
        else:
            assert set(per) == {"prefill-0", "decode-0"}
            assert per["decode-0"] == expected and per["prefill-0"] == expected, (path, per)


def test_kv_router_shows_prefix_cache_reuse(sweep):
    wf, _, _ = sweep
    for path, doc in results_of(wf).items():
        if "local-agg" in path:
            assert doc["figures"]["cache_read_share"] > 0.2, path
        else:  # the disaggregated frontend counts no cached tokens and the mocker's prefill exports none
            assert doc["figures"]["cache_read_share"] is None, path
            assert "prefill workers export no prefix-cache counters" in doc["unmeasured"]["cache_read_share"]
            continue
        # a perfect cache over the requests aiperf sent bounds what the stack reached (fresh stack per curve;
        # a later point on the warm stack may see earlier points' blocks, so only the first is bounded)
        theoretical = doc["figures"]["theoretical_prefix_hit"]
        assert theoretical is not None and 0.2 < theoretical <= 1, path
        if doc["identity"]["stack"]["position"] == 1:
            assert doc["figures"]["cache_read_share"] <= theoretical + 0.02, path


def test_server_ttft_is_reported_next_to_the_client(sweep):
    wf, _, _ = sweep
    for doc in results_of(wf).values():
        f = doc["figures"]
        assert f["server_ttft_s"]["mean"] > 0 and f["client_ttft_mean_s"] > 0
        assert f["ttft_gap_s"] is not None


def test_no_process_survives_the_sweep(sweep):
    _, _, since = sweep
    assert_no_strays(since, sweep[0])


def test_second_run_does_nothing(sweep):
    wf, _, _ = sweep
    before = {p: p.stat().st_mtime_ns for p in wf.glob("results/**/*") if p.is_file()}
    r = snakemake(wf, "results/summary.md")
    assert r.returncode == 0
    assert "Nothing to be done" in r.stdout + r.stderr
    assert before == {p: p.stat().st_mtime_ns for p in wf.glob("results/**/*") if p.is_file()}


def test_summary_lists_every_point(sweep):
    wf, _, _ = sweep
    md = (wf / "results" / "summary.md").read_text()
    for n in LOCAL_RECIPES:
        assert f"[{n}]({n}/c2.json)" in md and f"[{n}]({n}/c8.json)" in md
    assert "None: every selected point has a result." in md
    # the disaggregated stack's unmeasured prefix hit: a dash with its reason, never a measured 0.0%
    row = next(ln for ln in md.splitlines() if ln.startswith("| [local-disagg-1p1d-mocker]"))
    assert "| – [1] / " in row and "0.0%" not in row
    assert "[1] prefix hit not measured: disaggregated dynamo.mocker stack" in md
    # each recipe's declared eval ran on its warm stack (no third engine start: test above)
    accuracy = md.split("## Accuracy", 1)[1].split("\n## ", 1)[0]
    for n in LOCAL_RECIPES:
        doc = json.loads((wf / f"results/{n}/eval-mmlu.json").read_text())
        score = "no gradable answers" if doc["score"] is None else f"{100 * doc['score']:.1f} %"  # the mocker's words
        assert re.search(rf"\| {n} +\| mmlu +\| abstract_algebra +\| {score}", accuracy), accuracy


def test_snakemake_report_holds_every_point_by_scenario_and_recipe(sweep):
    wf, _, _ = sweep
    r = snakemake(wf, "--report", "report.html", "results/summary.md", timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    html = (wf / "report.html").read_text()
    for n in LOCAL_RECIPES:
        assert f"results/{n}/c2.json" in html and f"results/{n}/c8.json" in html
    assert "scenario local-sessions" in html and "results/summary.md" in html  # categories: scenario, summary
    assert "local-sessions-throughput-vs-interactivity.png" in html and "local-sessions-ttft-p95.png" in html
    assert not (wf / "results" / "report.html").exists()  # the report is not a result
    r = snakemake(wf, "-n", "results/summary.md")
    assert "Nothing to be done" in r.stdout + r.stderr  # report flags made nothing stale


def _in(wf, name: str) -> list[psutil.Process]:
    out = []
    for p in psutil.process_iter(["cmdline", "cwd"]):
        if p.info["cwd"] == str(wf) and any(name in a for a in p.info["cmdline"] or []):
            out.append(p)
    return out


def _workers_reach_the_store(wf, workers: int) -> bool:
    """``workers`` engine processes whose env names the address a running mooncake_master listens on."""
    try:
        listening = {
            f"{c.laddr.ip}:{c.laddr.port}"
            for m in _in(wf, "mooncake_master")
            for c in m.net_connections("tcp")
            if c.status == psutil.CONN_LISTEN
        }
        named = [p.environ().get("MOONCAKE_MASTER") for p in _in(wf, "dynamo.mocker")]
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False
    return len(named) >= workers and all(n in listening for n in named)


# the driver's environment as a Slurm step would hand it over: the job's GPU list and a system port
DRIVER_LEAKS = {"CUDA_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7", "DYN_SYSTEM_PORT": "9999"}
NON_ENGINE = {
    "frontend": "dynamo.frontend",
    "etcd": "/usr/bin/etcd",
    "guard": "sysguard.py",
    "store": "mooncake_master",
}


def _non_engine_envs(wf) -> dict | None:
    """The live environments (/proc/<pid>/environ) of the stack's frontend, etcd, guard and KV store."""
    try:
        envs = {role: [p.environ() for p in _in(wf, needle)] for role, needle in NON_ENGINE.items()}
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None
    return envs if all(envs.values()) else None


def test_rehearsal_of_a_production_recipe_runs_its_layout_locally(tmp_path):
    """DSV4 GB300 1P1D (4 nodes, per_node DEP8): same processes, ports, env and readiness, mockers as engines;
    its benchmark is aiperf's AgentX scenario replaying a generated Weka trace for real; no process but the
    engines sees a GPU list or a system port, whatever the driver's environment holds."""
    name = "dsv4-pro-gb300-1p1d-pdep8-ddep8-mtp"
    wf = copy_workflow(tmp_path / "wf", [name])
    target = f"results/rehearsal/{name}/c384.json"
    envs = {}
    with no_processes_left(wf):
        cmd = [str(BIN / "snakemake"), "--profile", "profiles/local", target, "--config", "cluster=gb300"]
        cmd.append("rehearsal=1")
        with open(tmp_path / "snakemake.out", "w") as out:
            run = subprocess.Popen(
                cmd, cwd=wf, stdout=out, stderr=subprocess.STDOUT,
                env=dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ['PATH']}", **DRIVER_LEAKS),
            )  # fmt: skip

        def live():  # every worker's own env names the live Mooncake master (its connector needs one)
            if run.poll() is not None:
                return "ended"
            envs.update(_non_engine_envs(wf) or {})
            return _workers_reach_the_store(wf, 4) and envs and "reached"

        try:
            seen = wait_until(live, 300, "four workers pointed at a live Mooncake master")
        finally:
            run.wait(timeout=600)
    out = (tmp_path / "snakemake.out").read_text()
    assert run.returncode == 0 and seen == "reached", out[-4000:]
    for role, found in envs.items():
        for env in found:
            assert not set(DRIVER_LEAKS) & set(env), (role, sorted(set(DRIVER_LEAKS) & set(env)))
    assert all(e.get("DYN_ROUTER_ACTIVE_REQUEST_EXPIRY_SECS") == "3600" for e in envs["frontend"])
    doc = json.loads((wf / target).read_text())
    assert validate_result(doc) == []
    # aiperf's own AgentX scenario, below its lock's minimum: stamped not submission-valid by aiperf
    locked = doc["identity"]["aiperf_scenario"]
    assert locked["name"] == "inferencex-agentx-mvp" and locked["submission_valid"] is False, locked
    assert "unsafe_override" in locked["invalid_reasons"] and doc["identity"]["request_plane_tls"] is True
    f = doc["figures"]
    assert f["requests_completed"] > 0 and f["requests_errored"] == 0 and f["requests_cancelled"] >= 0
    export = json.loads((wf / doc["artifacts"] / "profile_export_aiperf.json").read_text())
    (phase,) = export["input_config"]["phases"]
    assert phase["timing_mode"] == "agentic_replay" and phase["agentic_cache_warmup_duration"] > 0
    assert export["input_config"]["datasets"][0]["format"] == "weka_trace"
    assert doc["identity"]["rehearsal"] and doc["identity"]["recipe_engine"] == "dynamo.vllm"
    assert doc["identity"]["point"] == 384 and doc["identity"]["concurrency"] <= 32
    # hybrid load balancing: every node of a DEP8 worker registers and serves (none is headless)
    per_worker = doc["figures"]["requests_per_worker"]
    assert set(per_worker) == {"prefill-0-n0", "prefill-0-n1", "decode-0-n0", "decode-0-n1"}
    assert all(n > 0 for n in per_worker.values()), per_worker
    # the same control plane as production: a real etcd, no file discovery
    assert doc["identity"]["discovery"] == "etcd"
    logs = stack_logs(wf, target)
    assert {p.stem for p in logs.glob("*.log")} >= {"etcd", "frontend", *per_worker}
    assert not (logs / "discovery").exists()  # no file store: only etcd connects the processes
    assert "control plane healthy: etcd, kvstore" in stack_driver_log(logs)
    assert "Master service started on port" in (logs / "kvstore.log").read_text()  # the real mooncake_master


def test_three_frontends_behind_nginx_over_etcd_and_nats(tmp_path):
    """frontend.count 3: nginx (session affinity on the session header) in front of three frontends;
    readiness counts every frontend's registrations; a real etcd and NATS carry discovery and events."""
    wf = copy_workflow(tmp_path / "wf", ["local-agg-2x-mocker"])
    f = wf / "recipes" / "local-agg-2x-mocker.yaml"
    text = f.read_text().replace("frontend:\n", "frontend:\n  count: 3\n").replace("duration_s: 20", "duration_s: 8")
    f.write_text(text + "control_plane: {discovery: etcd, event_plane: nats}\n")
    target = "results/local-agg-2x-mocker/c16.json"
    with no_processes_left(wf):
        r = snakemake(wf, target, timeout=600)
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    doc = json.loads((wf / target).read_text())
    assert validate_result(doc) == []
    per_frontend = doc["figures"]["requests_per_frontend"]
    assert set(per_frontend) == {"frontend-0", "frontend-1", "frontend-2"}
    assert all(n > 0 for n in per_frontend.values()), per_frontend
    assert sum(per_frontend.values()) >= doc["figures"]["requests_completed"]
    assert doc["figures"]["cache_read_share"] > 0  # KV events reached the routers over NATS
    logs = stack_logs(wf, target)
    driver = stack_driver_log(logs)
    assert "control plane healthy: etcd, nats" in driver
    for fe in per_frontend:
        assert f"'{fe}': {{'backend': 2}}" in driver
    conf = (logs / "balancer/nginx.conf").read_text()
    assert "hash $http_x_dynamo_session_id consistent;" in conf and conf.count("    server 127.0.0.1:") == 3


def test_repeats_and_field_figures_on_the_real_stack(tmp_path):
    """One point measured twice on one stack by the real aiperf: each run and the confidence
    half-widths land in the result; batch, preemptions and grace-boundary cancellations are filled
    from the engines and aiperf's exports; the summary shows value ± half-width."""
    wf = copy_workflow(tmp_path / "wf", recipes=[])
    base = yaml.safe_load((ROOT / "recipes" / "local-agg-2x-mocker.yaml").read_text())
    write_recipe(wf, base, "twice", conc=(4,), duration=4, mutate=lambda d: d.update(repeats=2))
    with no_processes_left(wf):
        r = snakemake(wf, "results/summary.md", timeout=600)
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    doc = json.loads((wf / "results/twice/c4.json").read_text())
    assert validate_result(doc) == []
    f = doc["figures"]
    rep = f["repeats"]
    assert rep["n"] == 2 and len(rep["runs"]) == 2 and all(run["req_s"] for run in rep["runs"])
    assert rep["half_width"]["req_s"] is not None and rep["half_width"]["total_tps_per_gpu"] is not None
    assert f["batch_by_role"]["agg"]["p99"] >= f["batch_by_role"]["agg"]["mean"] > 0  # the mocker's own gauge
    assert f["preemptions"] is not None and f["requests_cancelled"] >= 0 and f["total_tps_per_gpu"] > 0
    row = next(ln for ln in (wf / "results/summary.md").read_text().splitlines() if ln.startswith("| [twice]"))
    assert " ± " in row and "agg " in row and "preempt." in row

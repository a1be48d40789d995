"""End to end on a real Slurm (3 fake nodes in network namespaces) through the Slurm executor plugin.

The mocker stack stands in for the engines; aiperf is real.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from servesweep.run.result import validate_result

from helpers import BIN, copy_workflow, stray_processes
from slurm.cluster import SlurmCluster, available

pytestmark = pytest.mark.slurm
HERE = Path(__file__).resolve().parent / "slurm"


@pytest.fixture(scope="module")
def cluster():
    why = available()
    if why:
        if os.environ.get("SERVESWEEP_REQUIRE_SLURM"):
            pytest.fail(f"Slurm tests required but unavailable: {why}")
        pytest.skip(why)
    c = SlurmCluster(nodes=3)
    c.started_munge = True
    try:
        yield c.up()
    finally:
        c.down()


@pytest.fixture(scope="module")
def swf(cluster, tmp_path_factory):
    wf = copy_workflow(tmp_path_factory.mktemp("slurm") / "wf", recipes=[])
    shutil.copytree(HERE / "profile", wf / "profiles" / "slurm-test")
    for f in (HERE / "recipes").glob("*.yaml"):
        shutil.copy2(f, wf / "recipes" / f.name)
    long = (HERE / "recipes" / "slurm-agg-2x.yaml").read_text()
    long = long.replace("name: slurm-agg-2x", "name: slurm-agg-long").replace("duration_s: 6", "duration_s: 600")
    (wf / "recipes" / "slurm-agg-long.yaml").write_text(long.replace("concurrency: [4, 8]", "concurrency: [2, 3]"))
    return wf


def sm(wf, *args, timeout=420):
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ['PATH']}")
    cmd = ["timeout", "-s", "KILL", str(timeout), str(BIN / "snakemake"), "--profile", "profiles/slurm-test", *args]
    return subprocess.run(cmd, cwd=wf, capture_output=True, text=True, env=env)


def nodes_in_log(path: Path) -> tuple[str | None, str | None]:
    text = path.read_text()
    node = re.search(r"^servesweep: node=(\S+)", text, re.M)
    gpus = re.search(r"^servesweep: CUDA_VISIBLE_DEVICES=(\S*)", text, re.M)
    return (node.group(1) if node else None, gpus.group(1) if gpus else None)


def test_aggregated_replicas_share_a_node_with_disjoint_gpus(swf):
    r = sm(swf, "results/slurm-agg-2x/c4.json")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    doc = json.loads((swf / "results/slurm-agg-2x/c4.json").read_text())
    assert validate_result(doc) == []
    assert doc["identity"]["job_id"].isdigit() and len(doc["identity"]["hosts"]) == 1
    logs = swf / "logs/slurm-agg-2x/c4"
    (n0, g0), (n1, g1) = nodes_in_log(logs / "agg-0.log"), nodes_in_log(logs / "agg-1.log")
    assert n0 == n1 == doc["identity"]["hosts"][0]
    assert g0 and g1 and not set(g0.split(",")) & set(g1.split(","))
    assert all(v > 0 for v in doc["figures"]["requests_per_worker"].values())


def test_disaggregated_roles_land_on_the_planned_nodes(swf):
    r = sm(swf, "results/slurm-disagg-2node/c4.json")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    doc = json.loads((swf / "results/slurm-disagg-2node/c4.json").read_text())
    assert validate_result(doc) == []
    plan = json.loads((swf / ".plans/slurm-disagg-2node/c4.json").read_text())
    hosts = sorted(doc["identity"]["hosts"])
    assert len(hosts) == 2
    logs = swf / "logs/slurm-disagg-2node/c4"
    placed = {p["name"]: nodes_in_log(logs / f"{p['name']}.log")[0] for p in plan["processes"]}
    assert placed["frontend"] == placed["prefill-0"] == hosts[0]  # node 0 of the allocation
    assert placed["decode-0"] == hosts[1]
    # the decode worker reached the prefill worker and the frontend across nodes
    assert doc["figures"]["requests_per_worker"]["decode-0"] > 0
    assert doc["figures"]["requests_per_worker"]["prefill-0"] > 0


def test_two_points_at_once_on_one_node_share_no_ports_or_discovery(swf):
    # targets first: --set-resources takes every following word
    r = sm(
        swf,
        "results/slurm-agg-2x/c4.json",
        "results/slurm-agg-2x/c8.json",
        "-R",
        "point",
        "--set-resources",
        "point:slurm_extra='--nodelist=n3'",
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    slots, hosts, discovery = [], set(), set()
    for c in (4, 8):
        doc = json.loads((swf / f"results/slurm-agg-2x/c{c}.json").read_text())
        hosts |= set(doc["identity"]["hosts"])
        log = (swf / f"logs/slurm-agg-2x/c{c}/driver.log").read_text()
        slots.append(int(re.search(r"port slot (\d+)", log).group(1)))
        discovery.add(str((swf / f"logs/slurm-agg-2x/c{c}/discovery").resolve()))
    assert hosts == {"n3"}
    assert slots[0] != slots[1] and len(discovery) == 2


def _run_until_bench(swf, target, *extra):
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ['PATH']}")
    proc = subprocess.Popen(
        ["timeout", "-s", "KILL", "400", str(BIN / "snakemake"), "--profile", "profiles/slurm-test", target, *extra],
        cwd=swf,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    log = swf / "logs" / Path(target).parent.relative_to("results") / Path(target).stem / "driver.log"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if log.exists() and "bench: aiperf" in log.read_text():
            return proc
        time.sleep(0.5)
    proc.kill()
    raise AssertionError(f"point never reached the benchmark: {log}")


def _finish(proc) -> str:
    out, _ = proc.communicate(timeout=300)
    return out


def _no_strays(since):
    deadline = time.monotonic() + 30
    while stray_processes(since) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert stray_processes(since) == []


def _fails_cleanly(swf, target: str, status: str, proc) -> None:
    since = time.time() - 300
    out = _finish(proc)
    assert proc.returncode != 0
    assert "Error in rule point" in out and status in out
    assert not (swf / target).exists()
    _no_strays(since)


def test_scancel_fails_the_point_cleanly(swf):
    proc = _run_until_bench(swf, "results/slurm-agg-long/c2.json")
    jobs = subprocess.run(["squeue", "-h", "-t", "R", "-o", "%i"], capture_output=True, text=True).stdout.split()
    assert jobs
    subprocess.run(["scancel", *jobs], check=True)
    _fails_cleanly(swf, "results/slurm-agg-long/c2.json", "CANCELLED", proc)


def test_time_limit_fails_the_point_cleanly(swf):
    proc = _run_until_bench(swf, "results/slurm-agg-long/c3.json", "--set-resources", "point:runtime=1")
    _fails_cleanly(swf, "results/slurm-agg-long/c3.json", "TIMEOUT", proc)


def test_rerun_submits_only_the_missing_points(swf):
    r = sm(swf, "-n", "results/summary.md")
    assert r.returncode == 0, r.stderr[-2000:]
    stale = set(re.findall(r"output: (results/[^,\s]+/c\d+\.json)", r.stdout))
    assert stale == {"results/slurm-agg-long/c2.json", "results/slurm-agg-long/c3.json"}

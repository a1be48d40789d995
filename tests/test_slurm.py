"""End to end on a real Slurm (3 fake nodes in network namespaces) through the Slurm executor plugin.

The mocker stack stands in for the engines; aiperf is real.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time
from datetime import datetime
from pathlib import Path

import psutil
import pytest
import yaml

from servesweep.contract import paths
from servesweep.run.result import validate_result
from servesweep.tools import dcgm_standin

from helpers import (
    BIN,
    assert_no_strays,
    copy_workflow,
    require,
    stack_driver_log,
    stack_logs,
    wait_until,
)
from slurm.cluster import NET, PRIVATE_DIRS, SlurmCluster, available

pytestmark = pytest.mark.slurm
HERE = Path(__file__).resolve().parent / "slurm"


@pytest.fixture(scope="module")
def cluster():
    require("slurm", available())
    with SlurmCluster(nodes=3) as c:  # waits for another suite's test cluster on this host, never tears it down
        yield c


@pytest.fixture(scope="module")
def swf(cluster, tmp_path_factory):
    wf = copy_workflow(tmp_path_factory.mktemp("slurm") / "wf", recipes=[])
    shutil.copytree(HERE / "profile", wf / "profiles" / "slurm-test")
    _container_rig(wf)
    for f in (HERE / "recipes").glob("*.yaml"):
        shutil.copy2(f, wf / "recipes" / f.name)
    curve = (HERE / "recipes" / "slurm-agg-2x.yaml").read_text().replace("name: slurm-agg-2x", "name: NAME")
    for name, conc, duration in [
        ("slurm-curve", "[2, 3, 4]", 6),
        ("slurm-curve-b", "[2, 3]", 6),
        ("slurm-curve-long", "[2, 3, 4]", 20),
    ]:
        text = curve.replace("NAME", name).replace("concurrency: [4, 8]", f"concurrency: {conc}")
        if name == "slurm-curve-b":  # other servers (an engine argument): a stack and a job of its own
            text = text.replace("4096]", "4000]")
        (wf / "recipes" / f"{name}.yaml").write_text(text.replace("duration_s: 6", f"duration_s: {duration}"))
    # the servers of slurm-curve, another scenario: its points run on slurm-curve's stack
    scenario = curve.replace("NAME", "slurm-scenario").replace("concurrency: [4, 8]", "concurrency: [5, 6]")
    scenario = scenario.replace("name: slurm-sessions", "name: slurm-synthetic").replace(
        'trace: {path: "{trace_dir}/local-sessions.jsonl", format: mooncake, block_size: 64}',
        "synthetic: {isl: 200, osl: 20, entries: 50}",
    )
    (wf / "recipes" / "slurm-scenario.yaml").write_text(scenario.replace("duration_s: 6", "duration_s: 4"))
    long = (HERE / "recipes" / "slurm-agg-2x.yaml").read_text()
    long = long.replace("name: slurm-agg-2x", "name: slurm-agg-long").replace("duration_s: 6", "duration_s: 600")
    (wf / "recipes" / "slurm-agg-long.yaml").write_text(long.replace("concurrency: [4, 8]", "concurrency: [2, 3]"))
    return wf


def _container_rig(wf: Path) -> None:
    """A recipe with an image runs in bubblewrap: the system, Python and venvs as the read-only "image",
    and a site filesystem (models, traces) that only the cluster's mounts reach."""
    site = wf.parent / "site"
    shutil.copytree(wf / ".cache/models/tiny-llama", site / "models/tiny-llama")
    shutil.copytree(wf / "recipes/traces", site / "traces")
    python = Path(os.path.realpath(wf / ".venvs/engine/bin/python")).parents[1]
    base = ["/usr", "/bin", "/lib", "/lib64", "/sbin", "/etc", str((wf / ".venvs").resolve()), str(python)]
    mounts = [f"{site}/models:/models:ro", f"{site}/traces:/traces:ro"]
    facts = wf / "profiles/slurm-test/cluster.yaml"
    rig = {"runtime": "bwrap", "base": [b for b in base if Path(b).exists()], "mounts": mounts}
    facts.write_text(facts.read_text() + f"container: {json.dumps(rig)}\n")


def sm(wf, *args, timeout=420):
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ['PATH']}")
    cmd = ["timeout", "-s", "KILL", str(timeout), str(BIN / "snakemake"), "--profile", "profiles/slurm-test", *args]
    return subprocess.run(cmd, cwd=wf, capture_output=True, text=True, env=env)


AGG, DISAGG, THREE_FE = (
    "results/slurm-agg-2x/c4.json",
    "results/slurm-disagg-2node/c4.json",
    "results/slurm-3fe-2node/c8.json",
)


@pytest.fixture(scope="module")
def batch(swf):
    """One submission for the layout, setup-step and container tests (issue #36: batched, their jobs
    run side by side on the rig's nodes); each test reads only its own results. The failing variants'
    recipes are gone again before any other test runs."""
    variants = {**_setup_variants(swf), **_container_variants(swf), **_eval_variant(swf)}
    targets = [AGG, DISAGG, THREE_FE, EVAL] + [f"results/{n}/c2.json" for n in variants]
    try:
        r = sm(swf, *targets, "--keep-going", timeout=600)
    finally:
        for name in variants:
            (swf / "recipes" / f"{name}.yaml").unlink()
    return r


def _built(swf, r, target: str) -> dict:
    assert (swf / target).exists(), r.stdout[-3000:] + r.stderr[-3000:]
    doc = json.loads((swf / target).read_text())
    assert validate_result(doc) == []
    return doc


def nodes_in_log(path: Path) -> tuple[str | None, str | None]:
    text = path.read_text()
    node = re.search(r"^servesweep: node=(\S+)", text, re.M)
    gpus = re.search(r"^servesweep: CUDA_VISIBLE_DEVICES=(\S*)", text, re.M)
    return (node.group(1) if node else None, gpus.group(1) if gpus else None)


def test_aggregated_replicas_share_a_node_with_disjoint_gpus(swf, batch):
    doc = _built(swf, batch, AGG)
    assert doc["identity"]["job_id"].isdigit() and len(doc["identity"]["hosts"]) == 1
    logs = stack_logs(swf, AGG)
    (n0, g0), (n1, g1) = nodes_in_log(logs / "agg-0.log"), nodes_in_log(logs / "agg-1.log")
    assert n0 == n1 == doc["identity"]["hosts"][0]
    assert g0 and g1 and not set(g0.split(",")) & set(g1.split(","))
    assert all(v > 0 for v in doc["figures"]["requests_per_worker"].values())


def test_nodes_share_the_filesystem_but_not_the_file_discovery_dir(cluster):
    """The harness's nodes see one filesystem (like NFS/Lustre) but each has its own Dynamo file-store
    dir, so a process falling back to file discovery could not meet another node through it."""
    (d,) = PRIVATE_DIRS

    def on(node, script):
        cmd = ["srun", "-N1", "-n1", f"--nodelist={node}", "--time=1", "/bin/sh", "-c", script]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=60)

    assert on("n1", f"touch {d}/probe-n1 /tmp/shared-probe-n1").returncode == 0
    seen = on("n2", f"test -e {d}/probe-n1 && echo store-shared; test -e /tmp/shared-probe-n1 && echo fs-shared")
    assert seen.stdout.split() == ["fs-shared"], seen.stdout + seen.stderr
    assert not Path(d, "probe-n1").exists()  # nor on the host
    Path("/tmp/shared-probe-n1").unlink(missing_ok=True)


def test_disaggregated_roles_land_on_the_planned_nodes(swf, batch):
    doc = _built(swf, batch, DISAGG)
    plan = json.loads((swf / ".plans/slurm-disagg-2node/c4.json").read_text())
    hosts = sorted(doc["identity"]["hosts"])
    assert len(hosts) == 2
    logs = stack_logs(swf, DISAGG)
    placed = {p["name"]: nodes_in_log(logs / f"{p['name']}.log")[0] for p in plan["processes"]}
    assert placed["etcd"] == placed["frontend"] == placed["prefill-0"] == hosts[0]  # node 0 of the allocation
    assert placed["decode-0"] == hosts[1]
    # the two nodes met only through the network: etcd on node 0, no file store anywhere
    assert doc["identity"]["discovery"] == "etcd" and not (logs / "discovery").exists()
    for p in plan["processes"]:
        assert "DYN_FILE_KV" not in p["env"] and "--discovery-backend file" not in " ".join(p["argv"])
    # each node's workers keep their system server on loopback behind that node's sysguard: the
    # driver on node 0 read node 1's health and request counts through it
    assert placed["sysguard-n0"] == hosts[0] and placed["sysguard-n1"] == hosts[1]
    # the decode worker reached the prefill worker and the frontend across nodes
    assert doc["figures"]["requests_per_worker"]["decode-0"] > 0
    assert doc["figures"]["requests_per_worker"]["prefill-0"] > 0


def test_a_two_node_point_reads_each_nodes_exporter_and_each_roles_power_is_its_nodes_curve(cluster, tmp_path):
    """The cluster's telemetry an exporter the stack starts on each GPU node (the DCGM stand-in, bound to
    the node's own address, each node's base power its own): aiperf on node 0 reads both, and the
    prefill (node 0) and decode (node 1) power per GPU equal their own node's curve over the window."""
    wf = copy_workflow(tmp_path / "wf", recipes=[])  # a workflow of its own: no other test's cluster facts
    shutil.copytree(HERE / "profile", wf / "profiles" / "slurm-test")
    shutil.copy2(HERE / "recipes" / "slurm-disagg-2node.yaml", wf / "recipes")
    t0, bases = time.time(), {name: 300.0 + 100.0 * i for i, name in enumerate(cluster.names)}
    addrs = {name: f"{NET}.{11 + i}" for i, name in enumerate(cluster.names)}
    command = [".venvs/engine/bin/python", "{workdir}/scripts/servesweep/tools/dcgm_standin.py", "--port", "{port}",
               "--bind", "{addr:self}", "--gpus", "8", "--swing", "50", "--period", "4", "--t0", repr(t0)]  # fmt: skip
    command += [f"--base-at={addrs[n]}={w}" for n, w in bases.items()]
    facts = wf / "profiles/slurm-test/cluster.yaml"
    telemetry = {"source": "exporter", "command": command, "interval_s": 0.02}  # 1 % on a 6 s window
    facts.write_text(facts.read_text() + f"telemetry: {json.dumps(telemetry)}\n")
    since = time.time()
    r = sm(wf, DISAGG)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    doc = _built(wf, r, DISAGG)
    logs = stack_logs(wf, DISAGG)
    node = {role: nodes_in_log(logs / f"{role}-0.log")[0] for role in ("prefill", "decode")}
    assert node["prefill"] != node["decode"], node
    export = json.loads((wf / doc["artifacts"] / "profile_export_aiperf.json").read_text())
    start, end = (datetime.fromisoformat(export[k]).timestamp() for k in ("start_time", "end_time"))
    e = doc["figures"]["energy"]
    assert e["gpus"] == 16, e  # both nodes' eight
    for role, host in node.items():
        curve = dcgm_standin.curves(8, bases[host], 50.0, 4.0, t0)
        watts = sum(c.energy_j(start, end) for c in curve) / (end - start) / 8
        assert e["power_w_per_gpu_by_role"][role] == pytest.approx(watts, rel=0.01), (role, host, e)
    assert_no_strays(since, wf, timeout=30)


def test_two_points_at_once_on_one_node_share_no_ports_or_discovery(swf):
    recipe = swf / "recipes/slurm-agg-pair.yaml"  # a recipe of its own: no other test's results
    recipe.write_text(
        (HERE / "recipes/slurm-agg-2x.yaml").read_text().replace("name: slurm-agg-2x", "name: slurm-agg-pair")
    )
    try:  # targets first: --set-resources takes every following word
        r = sm(
            swf,
            "results/slurm-agg-pair/c4.json",
            "results/slurm-agg-pair/c8.json",
            "--config",  # replaces the profile's config list: the cluster named again
            "cluster=slurm-test",
            "stack_reuse=0",
            "--set-resources",
            "point:slurm_extra='--nodelist=n3'",
        )
    finally:
        recipe.unlink()
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    slots, hosts, namespaces = [], set(), set()
    for c in (4, 8):
        doc = json.loads((swf / f"results/slurm-agg-pair/c{c}.json").read_text())
        hosts |= set(doc["identity"]["hosts"])
        log = (swf / f"logs/slurm-agg-pair/c{c}/driver.log").read_text()
        slots.append(int(re.search(r"port slot (\d+)", log).group(1)))
        namespaces.add(re.search(r"namespace (\S+),", log).group(1))
    assert hosts == {"n3"}
    assert slots[0] != slots[1] and len(namespaces) == 2  # own etcd ports and own namespace per stack


def test_three_frontends_behind_nginx_across_two_nodes(swf, batch):
    doc = _built(swf, batch, THREE_FE)
    per_frontend = doc["figures"]["requests_per_frontend"]
    assert set(per_frontend) == {"frontend-0", "frontend-1", "frontend-2"}
    assert all(n > 0 for n in per_frontend.values()), per_frontend
    logs = stack_logs(swf, THREE_FE)
    hosts = sorted(doc["identity"]["hosts"])
    assert nodes_in_log(logs / "frontend-1.log")[0] == hosts[1]  # a frontend on the second node
    assert nodes_in_log(logs / "balancer.log")[0] == hosts[0]
    driver = stack_driver_log(logs)
    for fe in per_frontend:  # readiness counted every frontend's registrations
        assert f"'{fe}': {{'backend': 1, 'prefill': 1}}" in driver


def _run_until_bench(swf, target, *extra, wait_for=None, first=None, env=None, limit=400):
    """Start snakemake on `target` (+ extra args) and return once `wait_for` (default: target) benchmarks;
    with `first`, that point's result must exist by then."""
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ['PATH']}", **(env or {}))
    targets = [first, target] if first else [target]
    proc = subprocess.Popen(
        [
            "timeout",
            "-s",
            "KILL",
            str(limit),
            str(BIN / "snakemake"),
            "--profile",
            "profiles/slurm-test",
            *targets,
            *extra,
        ],
        cwd=swf,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    watched = Path(wait_for or target)
    log = swf / "logs" / watched.parent.relative_to("results") / watched.stem / "driver.log"
    try:
        benchmarking = lambda: proc.poll() is not None or (log.exists() and "bench: aiperf" in log.read_text())  # noqa: E731
        wait_until(benchmarking, 240, f"'bench: aiperf' in {log} (or snakemake's end)")
        if proc.poll() is not None:  # it ended first: its own words say why (a search stopped, a refusal)
            raise AssertionError(f"snakemake ended (exit {proc.returncode}) before {watched} benchmarked")
        if first:
            assert (swf / first).exists(), f"{first} should be done before {watched} benchmarks"
    except AssertionError as e:
        proc.kill()
        out, _ = proc.communicate(timeout=30)
        raise AssertionError(f"{e}\n{out[-3000:]}") from None
    return proc


def _finish(proc, timeout: float = 300) -> str:
    out, _ = proc.communicate(timeout=timeout)
    return out


def _fails_cleanly(swf, target: str, status: str, proc) -> None:
    """`status`: words Slurm uses for the cause (the point's held-stack step names it)."""
    since = time.time() - 300
    out = _finish(proc)
    assert proc.returncode != 0
    assert "Error in rule held_point" in out, out[-3000:]
    assert any(word in out for word in status.split("|")), out[-3000:]
    assert not (swf / target).exists()
    assert_no_strays(since, swf, timeout=30)


def test_scancel_fails_the_point_cleanly(swf):
    proc = _run_until_bench(swf, "results/slurm-agg-long/c2.json")
    jobs = _our_jobs(swf, "R")
    assert jobs
    subprocess.run(["scancel", *jobs], check=True)
    _fails_cleanly(swf, "results/slurm-agg-long/c2.json", "CANCELLED", proc)


def test_a_time_limit_is_retried_once_on_a_new_allocation_and_keeps_the_cut_attempt(swf):
    """The held stack's job reaches its time limit mid-benchmark (here cut to a minute with scontrol
    as the benchmark starts, as an estimate too short for the engines would): an infrastructure
    failure, so the point runs once more on a new allocation and is measured; the cut attempt's logs
    stay beside it."""
    base = (HERE / "recipes" / "slurm-agg-2x.yaml").read_text().replace("concurrency: [4, 8]", "concurrency: [2]")
    recipe = swf / "recipes/slurm-timelimit.yaml"
    text = base.replace("name: slurm-agg-2x", "name: slurm-timelimit").replace("4096]", "4080]")
    # longer than the job has left: slurmctld enforces limits every 30 s, so the cut comes by 90 s in
    recipe.write_text(text.replace("duration_s: 6", "duration_s: 100"))
    since = time.time()
    try:
        proc = _run_until_bench(swf, "results/slurm-timelimit/c2.json", "--config", "cluster=slurm-test", limit=700)
        (first,) = _our_jobs(swf, "R")
        subprocess.run(["scontrol", "update", f"jobid={first}", "timelimit=1"], check=True, capture_output=True)
        out = _finish(proc, timeout=600)
    finally:
        recipe.unlink()
    assert proc.returncode == 0, out[-4000:]
    doc = json.loads((swf / "results/slurm-timelimit/c2.json").read_text())
    assert doc["identity"]["job_id"] != first  # measured in the new allocation
    assert out.count("stack: submitted held stack") == 2, out[-4000:]
    cut = swf / "logs/slurm-timelimit/c2.attempt-1"
    reason = json.loads((cut / "failure.json").read_text())["reason"]
    assert f"the held stack's Slurm job {first} ended (TIMEOUT)" in reason, reason
    assert "bench: aiperf" in (cut / "driver.log").read_text()
    assert_no_strays(since, swf, timeout=60)


def test_two_server_identities_are_two_jobs_each_on_one_stack(swf):
    """slurm-curve and slurm-scenario differ only in the scenario: one job, one engine start, their
    points back to back on one stack; slurm-curve-b has other servers: a job and stack of its own."""
    shared = [f"results/slurm-curve/c{c}.json" for c in (2, 3)] + ["results/slurm-scenario/c5.json"]
    own = ["results/slurm-curve-b/c2.json"]
    r = sm(swf, *shared, *own)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-4000:]
    docs = {t: json.loads((swf / t).read_text())["identity"] for t in shared + own}
    for group in (shared, own):
        mine = [docs[t] for t in group]
        assert len({d["job_id"] for d in mine}) == 1 and len({d["stack"]["id"] for d in mine}) == 1, mine
        assert sorted(d["stack"]["position"] for d in mine) == list(range(1, len(group) + 1))
    assert {docs[t]["scenario"] for t in shared} == {"slurm-sessions", "slurm-synthetic"}
    assert len({d["job_id"] for d in docs.values()}) == 2  # one Slurm job per server identity
    assert out.count("stack: submitted held stack") == 2, out[-4000:]  # two sbatch calls, not four
    assert "has been submitted with SLURM jobid" not in out  # no job per point
    for t in (shared[0], own[0]):  # one engine start each
        keeper = stack_logs(swf, t) / "keeper-driver.log"
        assert len(re.findall(r"\] starting \d+ processes", keeper.read_text())) == 1


def test_a_halving_sweep_runs_its_kept_variant_on_the_held_stack_its_screen_started(swf):
    """Two variants screened at c4 as held stacks; in the same run the better one's full point runs as
    a step of its screen's job (one engine start each, two sbatch calls in all); the other's job ends
    once the decision is in, and no job is left."""
    doc = yaml.safe_load((HERE / "recipes" / "slurm-agg-2x.yaml").read_text())
    doc |= {"name": "slurm-halving", "concurrency": [4], "slo": {"ttft_p95_s": 2.0}}
    doc["engine"]["args"] += ["--max-num-seqs", 8]
    doc["sweep"] = {
        "axes": {"seqs": {"field": "engine.args[--max-num-seqs]", "values": [1, 8]}},
        "strategy": "halving",
        "halving": {"target": 4, "keep": 0.5, "screen_share": 0.5},
    }
    (swf / "recipes" / "slurm-halving.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    since = time.time()
    try:
        r = sm(swf, "results/summary.md", "--config", "cluster=slurm-test", "recipes=slurm-halving")
        out = r.stdout + r.stderr
        assert r.returncode == 0, out[-4000:]
        assert out.count("stack: submitted held stack") == 2, out[-4000:]
        full = {n: sorted(paths.point_files(swf / "results" / f"slurm-halving.seqs-{n}")) for n in (1, 8)}
        kept = [n for n, found in full.items() if found]
        assert len(kept) == 1 and [c for c, _ in full[kept[0]]] == [4], full
        screen = f"results/slurm-halving.seqs-{kept[0]}.screen/c4.json"
        ids = [json.loads((swf / screen).read_text())["identity"]]
        ids += [json.loads(p.read_text())["identity"] for _, p in full[kept[0]]]
        assert len({(i["job_id"], i["stack"]["id"]) for i in ids}) == 1, ids
        keeper = stack_logs(swf, screen) / "keeper-driver.log"
        assert len(re.findall(r"\] starting \d+ processes", keeper.read_text())) == 1
        wait_until(lambda: not _our_jobs(swf), 120, "the sweep's held jobs to end")
    finally:
        (swf / "recipes" / "slurm-halving.yaml").unlink()
    assert_no_strays(since, swf, timeout=30)


def test_scancel_mid_curve_keeps_finished_points(swf):
    """`scancel` of a held stack's job while its second point benchmarks: the first point's result
    stays, the running one fails naming the cancel, and the third is skipped (the stack died in this
    run: no new allocation for it)."""
    targets = [f"results/slurm-curve-long/c{c}.json" for c in (2, 3, 4)]
    proc = _run_until_bench(swf, targets[1], *targets[2:], first=targets[0])  # c3 benchmarks after c2
    jobs = _our_jobs(swf, "R")
    assert len(jobs) == 1
    subprocess.run(["scancel", *jobs], check=True)
    since = time.time() - 300
    out = _finish(proc)
    assert proc.returncode != 0, out[-3000:]
    assert (swf / targets[0]).exists() and not (swf / targets[1]).exists() and not (swf / targets[2]).exists()
    reasons = [json.loads((swf / f"logs/slurm-curve-long/c{c}/failure.json").read_text())["reason"] for c in (3, 4)]
    assert f"Slurm job {next(iter(jobs))} ended (CANCELLED" in reasons[0], reasons
    assert reasons[1].startswith("skipped: the held stack"), reasons
    assert out.count("stack: submitted held stack") == 1, out[-3000:]
    assert_no_strays(since, swf, timeout=30)


def test_rerun_submits_only_the_missing_points(swf):
    """A curve measured once, one result deleted and one garbled: the next dry run lists exactly those."""
    curve = (swf / "recipes/slurm-curve.yaml").read_text().replace("name: slurm-curve", "name: slurm-rerun")
    recipe = swf / "recipes/slurm-rerun.yaml"
    recipe.write_text(curve.replace("duration_s: 6", "duration_s: 3"))
    targets = [f"results/slurm-rerun/c{c}.json" for c in (2, 3, 4)]
    try:
        r = sm(swf, *targets)
        assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
        (swf / targets[1]).unlink()
        (swf / targets[2]).write_text('{"schema": "servesweep.result/3", "iden')
        r = sm(swf, "-n", *targets)
    finally:
        recipe.unlink()
    assert r.returncode == 0, r.stderr[-2000:]
    # the missing one, and the garbled one (a dry run lists it as the real run remeasures it, moving nothing)
    assert set(re.findall(r"output: (results/[^,\s]+/c\d+\.json)", r.stdout)) == {targets[1], targets[2]}
    assert f"{targets[2]}: not JSON" in r.stderr and "a real run moves it aside and reruns the point" in r.stderr


def _nodes(state: str, names: list[str], check: bool = True) -> None:
    cmd = ["scontrol", "update", f"nodename={','.join(names)}", f"state={state}"]
    subprocess.run(cmd + (["reason=servesweep-queue-test"] if state == "drain" else []), check=check)


def test_queued_jobs_run_the_plan_they_were_submitted_with(cluster, tmp_path):
    """Jobs wait in the queue while one recipe is edited and another broken: each job runs the plan it
    was submitted with; the next snakemake reports the broken recipe and the edited recipe as stale."""
    wf = copy_workflow(tmp_path / "wf", recipes=[])
    shutil.copytree(HERE / "profile", wf / "profiles" / "slurm-test")
    _container_rig(wf)
    base = (HERE / "recipes" / "slurm-agg-2x.yaml").read_text()
    (wf / "recipes" / "q-edit.yaml").write_text(base.replace("name: slurm-agg-2x", "name: q-edit"))
    broken_text = base.replace("name: slurm-agg-2x", "name: q-break").replace("concurrency: [4, 8]", "concurrency: [4]")
    (wf / "recipes" / "q-break.yaml").write_text(broken_text)
    targets = ["results/q-edit/c4.json", "results/q-edit/c8.json", "results/q-break/c4.json"]
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ['PATH']}")
    cmd = ["timeout", "-s", "KILL", "400", str(BIN / "snakemake"), "--profile", "profiles/slurm-test", *targets]
    _nodes("drain", cluster.names)
    proc = None
    try:
        proc = subprocess.Popen(cmd, cwd=wf, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)

        def pending() -> bool:
            return len(_our_jobs(wf, "PD")) == 1  # one job per server identity: q-edit's two points and q-break's one

        wait_until(pending, 120, "one pending job")
        submitted = {t: (wf / t.replace("results/", ".plans/")).read_bytes() for t in targets}
        (wf / "recipes" / "q-edit.yaml").write_text(base.replace("name: slurm-agg-2x", "name: q-edit").replace(
            "--num-gpu-blocks-override, 4096", "--num-gpu-blocks-override, 2048"))  # fmt: skip
        (wf / "recipes" / "q-break.yaml").write_text("name: [q-break\n")
        _nodes("resume", cluster.names)
        out, _ = proc.communicate(timeout=360)
        assert proc.returncode == 0, out[-4000:]
    finally:
        _nodes("resume", cluster.names, check=False)  # resumed already unless the body failed early
        if proc and proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=30)
    for t in targets:
        doc = json.loads((wf / t).read_text())
        assert doc["identity"]["plan_fingerprint"] == json.loads(submitted[t])["fingerprints"]["plan"], t
        assert (wf / t.replace("results/", ".plans/")).read_bytes() == submitted[t]  # nothing re-rendered
    r = sm(wf, "-n", "results/summary.md")
    assert r.returncode != 0 and "recipes/q-break.yaml" in r.stderr and "Traceback" not in r.stderr
    (wf / "recipes" / "q-break.yaml").write_text(broken_text)
    r = sm(wf, "-n", *targets)
    assert r.returncode == 0, r.stderr[-2000:]
    assert set(re.findall(r"output: (results/[^,\s]+/c\d+\.json)", r.stdout)) == set(targets[:2])
    assert_no_strays(time.time() - 400, wf, timeout=30)


def _squeue_ids() -> set[str]:
    return set(subprocess.run(["squeue", "-h", "-o", "%i"], capture_output=True, text=True).stdout.split())


def _our_jobs(wf: Path, state: str | None = None) -> set[str]:
    """Job ids (in ``state``: R, PD, ...) submitted from the workflow ``wf``: never another test's or user's."""
    cmd = ["squeue", "-h", "-o", "%i %Z"] + (["-t", state] if state else [])
    out = subprocess.run(cmd, capture_output=True, text=True).stdout
    rows = [line.split(None, 1) for line in out.splitlines() if line.strip()]
    return {jid for jid, cwd in rows if Path(cwd.strip()).is_relative_to(wf.resolve())}


def _search_recipe(swf: Path, name: str, duration: int = 6, extra: str = "") -> Path:
    """A capacity search of several probes on the mocker: 6 sequences in flight (2 replicas x 3), so
    c8 queues and misses the TTFT SLO; on a quiet machine it probes c2, c4, c8, c6 and c5 or c7 (not
    c1: one session on two replicas leaves one idle, which the validity gate refuses); under load c4
    may miss already (c2, c4, c3). Either way at least 3 probes, each decided after the last."""
    base = (HERE / "recipes" / "slurm-agg-2x.yaml").read_text().replace("name: slurm-agg-2x", f"name: {name}")
    text = base.replace("--num-gpu-blocks-override, 4096]", "--num-gpu-blocks-override, 4096, --max-num-seqs, 3]")
    search = "concurrency: [2]\ncapacity: {min: 2, max: 16, tolerance: 1}\nslo: {ttft_p95_s: 0.25}" + extra
    recipe = swf / "recipes" / f"{name}.yaml"
    recipe.write_text(text.replace("concurrency: [4, 8]", search).replace("duration_s: 6", f"duration_s: {duration}"))
    return recipe


def test_a_capacity_search_holds_one_allocation_and_starts_its_engines_once(swf):
    """Each probe is decided after the previous one and is its own cached target, yet all of them run
    on one held stack: one sbatch (the stack's own job), one engine start; the job ends with the search.
    The recipe's eval is a step of the same job, on the same stack."""
    recipe = _search_recipe(swf, "slurm-cap", extra="\nevals:\n  mmlu: {tasks: [abstract_algebra], n_shots: 0}")
    since = time.time()
    try:
        r = sm(swf, "results/slurm-cap/capacity.json", "results/slurm-cap/eval-mmlu.json", timeout=900)
        # each probe cached; a linger asked now changes what the job would ask for, not what was measured
        again = sm(swf, "-n", "results/slurm-cap/capacity.json", "--config", "cluster=slurm-test", "linger_s=30")
    finally:
        recipe.unlink()  # the other tests' dry runs of results/summary.md stay as they were
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-4000:]
    cap = json.loads((swf / "results/slurm-cap/capacity.json").read_text())
    probes = {p["concurrency"]: json.loads((swf / p["result"]).read_text()) for p in cap["probes"]}
    # c2 holds, the first miss (c4 or c8) is bisected to a boundary of width 1: 3 probes or more
    assert len(probes) >= 3 and 2 in probes, sorted(probes)
    idents = [d["identity"] for d in probes.values()]
    assert len({i["job_id"] for i in idents}) == 1 and len({i["stack"]["id"] for i in idents}) == 1, idents
    evaluation = json.loads((swf / "results/slurm-cap/eval-mmlu.json").read_text())
    assert evaluation["identity"]["stack"] == idents[0]["stack"]["id"] and evaluation["total"] == 12
    assert out.count("stack: submitted held stack") == 1, out[-4000:]  # one allocation holding GPUs
    assert "has been submitted with SLURM jobid" not in out  # no group job per probe
    keeper = stack_logs(swf, cap["probes"][0]["result"]) / "keeper-driver.log"
    assert len(re.findall(r"\] starting \d+ processes", keeper.read_text())) == 1  # one engine start
    assert again.returncode == 0 and "Nothing to be done" in again.stdout + again.stderr, again.stdout[-3000:]
    p95 = {c: d["figures"]["ttft_s"]["p95"] for c, d in probes.items()}
    held, missed = cap["capacity"], cap["lowest_miss"]
    assert held is not None and missed is not None, cap  # c2 holds and c8 misses (the docstring's shape)
    assert p95[held] <= 0.25 < p95[missed] and missed - held <= 1, (cap, p95)
    job_id = idents[0]["job_id"]
    wait_until(lambda: job_id not in _squeue_ids(), 60, f"the held stack's job {job_id} to end")
    assert_no_strays(since, swf, timeout=30)


def test_scancel_of_a_held_stack_fails_the_running_probe_and_keeps_the_finished_ones(swf):
    recipe = _search_recipe(swf, "slurm-cap-cancel", duration=30)
    since = time.time()
    try:
        first = "results/slurm-cap-cancel/c2.json"
        proc = _run_until_bench(
            swf, "results/slurm-cap-cancel/capacity.json", wait_for="results/slurm-cap-cancel/c4.json", first=first
        )
        held = _held_job(swf, "slurm-cap-cancel")
        subprocess.run(["scancel", held], check=True)
        out = _finish(proc)
    finally:
        recipe.unlink()
    assert proc.returncode != 0, out[-3000:]
    assert (swf / first).exists() and not (swf / "results/slurm-cap-cancel/c4.json").exists()
    reason = json.loads((swf / "logs/slurm-cap-cancel/c4/failure.json").read_text())["reason"]
    assert f"the held stack's Slurm job {held} ended (CANCELLED" in reason, reason
    assert_no_strays(since, swf, timeout=30)


def _held_job(swf: Path, recipe: str) -> str:
    """The Slurm job of the one held stack the recipe's points submitted (from their logs)."""
    lines = []
    for log in (swf / "logs" / recipe).glob("c*.snakemake.log"):
        lines += [line for line in log.read_text().splitlines() if "stack: submitted held stack" in line]
    (line,) = lines
    return line.split("Slurm job ")[1].split()[0]


def test_a_held_stack_that_cannot_start_costs_one_allocation_and_the_rest_go_on(swf):
    """Two recipes on held stacks (a linger keeps them), one whose setup step fails: its configuration
    takes one allocation, its other points are skipped with the reason (the canary), and the other
    recipe's points are measured in one allocation of their own."""
    (swf / "setup").mkdir(exist_ok=True)
    (swf / "setup/broken.sh").write_text("echo cannot set up\nexit 3\n")
    base = (HERE / "recipes" / "slurm-agg-2x.yaml").read_text().replace("concurrency: [4, 8]", "concurrency: [2, 3]")
    base = base.replace("duration_s: 6", "duration_s: 4") + "stack: {linger_s: 1}\n"
    recipes = {"slurm-canary-bad": base + "setup: {post_install: setup/broken.sh}\n", "slurm-canary-good": base}
    for name, text in recipes.items():
        (swf / "recipes" / f"{name}.yaml").write_text(text.replace("name: slurm-agg-2x", f"name: {name}"))
    targets = [f"results/{n}/c{c}.json" for n in recipes for c in (2, 3)]
    since = time.time()
    try:
        r = sm(swf, *targets, "--keep-going", "--config", "cluster=slurm-test", "recipes=" + ",".join(recipes))
    finally:
        for name in recipes:
            (swf / "recipes" / f"{name}.yaml").unlink()
    out = r.stdout + r.stderr
    assert r.returncode != 0, out[-4000:]
    submitted = [n for n in recipes for log in (swf / "logs" / n).glob("c*.snakemake.log")
                 if "stack: submitted held stack" in log.read_text()]  # fmt: skip
    assert sorted(submitted) == sorted(recipes), submitted  # one allocation per configuration
    good = [json.loads((swf / t).read_text())["identity"] for t in targets[2:]]
    assert len({i["job_id"] for i in good}) == 1 and len({i["stack"]["id"] for i in good}) == 1
    assert not any((swf / t).exists() for t in targets[:2])
    reasons = [json.loads((swf / f"logs/slurm-canary-bad/c{c}/failure.json").read_text())["reason"] for c in (2, 3)]
    assert all("setup failed: setup/broken.sh" in why for why in reasons), reasons  # the stack's own words
    assert sum("skipped: the held stack" in why and "(the canary" in why for why in reasons) == 1, reasons
    bill = json.loads((swf / ".plans/bill-slurm-test.json").read_text())  # as the jobs started
    assert sorted(r for stack in bill["stacks"] for r in stack["recipes"]) == sorted(recipes) and bill["gpu_h"] > 0
    assert_no_strays(since, swf, timeout=60)


def test_a_requeued_allocation_runs_again_and_keeps_the_first_attempt(swf):
    """An infrastructure failure (here `scontrol requeue` of the held stack's job, as for a node
    failure or a preemption) is retried: Slurm runs the job again, its keeper starts the stack afresh,
    the point is measured in the job's second run and the interrupted attempt's logs stay beside it."""
    base = (HERE / "recipes" / "slurm-agg-2x.yaml").read_text().replace("concurrency: [4, 8]", "concurrency: [2]")
    recipe = swf / "recipes/slurm-requeue.yaml"
    recipe.write_text(base.replace("name: slurm-agg-2x", "name: slurm-requeue").replace("4096]", "4064]"))
    since = time.time()
    try:
        proc = _run_until_bench(swf, "results/slurm-requeue/c2.json", "--config", "cluster=slurm-test")
        (job_id,) = _our_jobs(swf, "R")
        subprocess.run(["scontrol", "requeue", job_id], check=True, capture_output=True)
        out = _finish(proc)
    finally:
        recipe.unlink()
    assert proc.returncode == 0, out[-4000:]
    doc = json.loads((swf / "results/slurm-requeue/c2.json").read_text())
    assert doc["identity"]["job_id"] == job_id  # the same job, run again
    first = swf / "logs/slurm-requeue/c2.attempt-1"
    assert first.is_dir() and "bench: aiperf" in (first / "driver.log").read_text()
    assert f"Slurm job {job_id} was requeued" in json.loads((first / "failure.json").read_text())["reason"]
    keeper = (stack_logs(swf, "results/slurm-requeue/c2.json") / "keeper-driver.log").read_text()
    assert "Slurm job restarted (1): starting the stack again" in keeper
    assert len(re.findall(r"\] starting \d+ processes", keeper)) == 2  # once per run of the job
    assert_no_strays(since, swf, timeout=60)


def test_a_point_that_fails_on_a_held_stack_leaves_it_to_the_next_point(swf):
    """A point's own failure (its aiperf killed mid-benchmark) is not the stack's: the held stack
    stays up, and the configuration's next point is measured on it, in the same allocation."""
    base = (HERE / "recipes" / "slurm-agg-2x.yaml").read_text().replace("concurrency: [4, 8]", "concurrency: [2, 3]")
    base = base.replace("duration_s: 6", "duration_s: 8") + "stack: {linger_s: 1}\n"
    recipe = swf / "recipes/slurm-point-fails.yaml"
    recipe.write_text(base.replace("name: slurm-agg-2x", "name: slurm-point-fails"))
    first, second = "results/slurm-point-fails/c2.json", "results/slurm-point-fails/c3.json"
    since = time.time()
    try:
        proc = _run_until_bench(swf, second, first, "--keep-going", "--config", "cluster=slurm-test", wait_for=first)
        art = str(swf / "logs/slurm-point-fails/c2/aiperf")
        client = wait_until(lambda: _process_with(["aiperf", art]), 30, "c2's aiperf")
        client.kill()
        out = _finish(proc)
    finally:
        recipe.unlink()
    assert proc.returncode != 0, out[-4000:]
    assert not (swf / first).exists()
    reason = json.loads((swf / "logs/slurm-point-fails/c2/failure.json").read_text())["reason"]
    assert "aiperf exited with code" in reason and "skipped" not in reason, reason
    doc = json.loads((swf / second).read_text())["identity"]
    assert doc["job_id"] == _held_job(swf, "slurm-point-fails")  # one allocation for both
    assert doc["stack"]["position"] == 2  # after the failed point, on the same stack
    assert_no_strays(since, swf, timeout=60)


def _process_with(words: list[str]) -> psutil.Process | None:
    for p in psutil.process_iter(["cmdline"]):
        line = " ".join(p.info["cmdline"] or ())
        if all(w in line for w in words):
            return p
    return None


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGINT], ids=["SIGKILL", "SIGINT"])
def test_a_killed_or_interrupted_snakemake_releases_its_held_stack(swf, sig):
    """SIGKILL: the keeper sees the heartbeat stop (15 s here) and ends the job, failing the running
    probe. Ctrl-C: snakemake lets the running probe finish (its result is kept), then its last beat
    says it exited and the job ends at once (well within the default 120 s timeout)."""
    name = f"slurm-cap-{sig.name.lower()}"
    # SIGKILL: the probe must outlast the heartbeat timeout; Ctrl-C: snakemake waits for it to end
    recipe = _search_recipe(swf, name, duration=60 if sig == signal.SIGKILL else 15)
    env = {"SERVESWEEP_HEARTBEAT_TIMEOUT_S": "15"} if sig == signal.SIGKILL else {}
    since = time.time()
    try:
        proc = _run_until_bench(swf, f"results/{name}/capacity.json", wait_for=f"results/{name}/c2.json", env=env)
        held = _held_job(swf, name)
        for p in psutil.Process(proc.pid).children():
            if "snakemake" in " ".join(p.cmdline()):
                p.send_signal(sig)
        _finish(proc)
        wait_until(lambda: held not in _squeue_ids(), (15 + 90) if sig == signal.SIGKILL else 60, f"job {held} to end")
    finally:
        recipe.unlink()
    if sig == signal.SIGKILL:
        reason = json.loads((swf / f"logs/{name}/c2/failure.json").read_text())["reason"]
        assert "the snakemake that submitted this job is gone" in reason, reason
        assert not (swf / f"results/{name}/c2.json").exists()
    else:  # Ctrl-C: the running probe finishes and its result is kept
        assert validate_result(json.loads((swf / f"results/{name}/c2.json").read_text())) == []
        assert not (swf / f"logs/{name}/c2/failure.json").exists()
    assert_no_strays(since, swf, timeout=30)


def test_a_lingering_held_stack_is_attached_to_by_a_second_snakemake(swf):
    """stack.linger_s keeps the held stack's job after the first run; a follow-up snakemake of another
    recipe with the same servers and no linger of its own runs its point on it (no sbatch, no engine
    start), and the stack ends after that point, as the follow-up run asks."""
    base = (HERE / "recipes" / "slurm-agg-2x.yaml").read_text().replace("name: slurm-agg-2x", "name: slurm-linger")
    recipes = [swf / "recipes" / "slurm-linger.yaml", swf / "recipes" / "slurm-linger-b.yaml"]
    recipes[0].write_text(base.replace("concurrency: [4, 8]", "concurrency: [2]\nstack: {linger_s: 120}"))
    recipes[1].write_text(base.replace("name: slurm-linger", "name: slurm-linger-b").replace("[4, 8]", "[3]"))
    since = time.time()
    try:
        first = sm(swf, "results/slurm-linger/c2.json", "--config", "cluster=slurm-test", "recipes=slurm-linger")
        second = sm(swf, "results/slurm-linger-b/c3.json", "--config", "cluster=slurm-test", "recipes=slurm-linger-b")
    finally:
        for r in recipes:
            r.unlink()
    assert first.returncode == 0, (first.stdout + first.stderr)[-4000:]
    assert second.returncode == 0, (second.stdout + second.stderr)[-4000:]
    a, b = (
        json.loads((swf / t).read_text())["identity"]
        for t in ("results/slurm-linger/c2.json", "results/slurm-linger-b/c3.json")
    )
    assert a["job_id"] == b["job_id"] and a["stack"]["id"] == b["stack"]["id"], (a, b)
    assert (a["stack"]["position"], b["stack"]["position"]) == (1, 2)
    assert "stack: submitted held stack" in first.stderr + first.stdout
    assert "stack: submitted held stack" not in second.stderr + second.stdout
    assert "joining held stack" in second.stderr + second.stdout
    wait_until(lambda: a["job_id"] not in _squeue_ids(), 60, "the stack's job to end after the follow-up's point")
    keeper = (stack_logs(swf, "results/slurm-linger/c2.json") / "keeper-driver.log").read_text()
    assert len(re.findall(r"\] starting \d+ processes", keeper)) == 1 and "all 1 expected point(s) done" in keeper
    assert_no_strays(since, swf, timeout=30)


SETUP_VARIANTS = ("slurm-setup-ok", "slurm-setup-fails", "slurm-pin-wrong")


EVAL = "results/slurm-agg-eval/eval-mmlu.json"


def _eval_variant(swf) -> dict[str, str]:
    """A recipe with an eval, on servers of its own (an engine argument): its point and its eval."""
    base = (HERE / "recipes" / "slurm-agg-2x.yaml").read_text().replace("concurrency: [4, 8]", "concurrency: [2]")
    text = base.replace("name: slurm-agg-2x", "name: slurm-agg-eval").replace("4096]", "4032]")
    text += "evals:\n  mmlu: {tasks: [abstract_algebra], n_shots: 0}\n"
    (swf / "recipes/slurm-agg-eval.yaml").write_text(text)
    return {"slurm-agg-eval": text}


def test_an_eval_joins_its_points_held_stack(swf, batch):
    """The eval is one more step of its stack's held job: one allocation, one engine start."""
    point = _built(swf, batch, "results/slurm-agg-eval/c2.json")
    assert (swf / EVAL).exists(), batch.stdout[-3000:] + batch.stderr[-3000:]
    evaluation = json.loads((swf / EVAL).read_text())
    assert evaluation["total"] == 12 and evaluation["identity"]["stack"] == point["identity"]["stack"]["id"]
    keeper = (stack_logs(swf, "results/slurm-agg-eval/c2.json") / "keeper-driver.log").read_text()
    assert len(re.findall(r"\] starting \d+ processes", keeper)) == 1


def _setup_variants(swf) -> dict[str, str]:
    (swf / "setup").mkdir(exist_ok=True)
    (swf / "setup/site.sh").write_text(
        'set -eu\nmkdir -p "$PYTHONPATH"\n'
        'printf \'print("servesweep-test: site module imported")\\n\' > "$PYTHONPATH/sitecustomize.py"\n'
    )
    (swf / "setup/fail.sh").write_text("echo half-way\nexit 3\n")
    base = (HERE / "recipes" / "slurm-agg-2x.yaml").read_text().replace("concurrency: [4, 8]", "concurrency: [2]")
    extras = (
        "setup: {post_install: setup/site.sh}\n",
        "setup: {post_install: setup/fail.sh}\n",
        "dynamo: {version: 0.0.1}\n",
    )
    out = {}
    for name, extra in zip(SETUP_VARIANTS, extras, strict=True):
        text = base.replace("name: slurm-agg-2x", f"name: {name}").replace("env: {DYN_LOG: warn}", "")
        env = 'env: {DYN_LOG: warn, PYTHONPATH: "{run_dir}/site"}\n'
        out[name] = text + extra + env
        (swf / "recipes" / f"{name}.yaml").write_text(out[name])
    return out


def test_setup_steps_and_pins_run_in_each_engine_step_on_its_node(swf, batch):
    r, targets = batch, [f"results/{n}/c2.json" for n in SETUP_VARIANTS]
    assert r.returncode != 0
    ok = _built(swf, r, targets[0])["identity"]
    assert ok["tools"]["engine"] == f"ai-dynamo {ok['tools']['running']['ai-dynamo']}"
    for proc in ("agg-0", "agg-1"):
        log = (stack_logs(swf, targets[0]) / f"{proc}.log").read_text()
        node = nodes_in_log(stack_logs(swf, targets[0]) / f"{proc}.log")[0]
        assert f"servesweep: setup done on node {node}" in log and node in ok["hosts"]
        assert log.index("setup done") < log.index("servesweep-test: site module imported")
    for name, text in [
        ("slurm-setup-fails", "setup failed: setup/fail.sh on node n"),
        ("slurm-pin-wrong", f"ai-dynamo pinned 0.0.1, running {ok['tools']['running']['ai-dynamo']}"),
    ]:
        reason = json.loads((swf / f"logs/{name}/c2/failure.json").read_text())["reason"]
        assert text in reason and "during startup" in reason, reason
        assert not (swf / f"results/{name}/c2.json").exists()


CONTAINER_VARIANTS = ("slurm-container", "slurm-container-host-model", "slurm-container-lost-trace")


def _container_variants(swf) -> dict[str, str]:
    site = swf.parent / "site"
    (swf / "setup").mkdir(exist_ok=True)
    (swf / "setup/look.sh").write_text(
        f"test -e {site} && echo 'rig: host site visible' || echo 'rig: host site hidden'\n"
    )
    base = (HERE / "recipes" / "slurm-agg-2x.yaml").read_text().replace("concurrency: [4, 8]", "concurrency: [2]")
    base = base.replace("{model_dir}/tiny-llama", "/models/tiny-llama").replace("{trace_dir}", "/traces")
    texts = (
        base,
        base.replace("/models/tiny-llama", f"{site}/models/tiny-llama"),
        # under the trace mount but not there; other servers too (an env var): a failed point ends its
        # group job's later points (the job's nested snakemake does not keep going), and this one must
        # not take slurm-container with it
        base.replace("/traces/", "/traces/nowhere/").replace(
            "env: {DYN_LOG: warn}", "env: {DYN_LOG: warn, RIG_VARIANT: lost-trace}"
        ),
    )
    out = {}
    for name, text in zip(CONTAINER_VARIANTS, texts, strict=True):
        text = text.replace("name: slurm-agg-2x", f"name: {name}")
        out[name] = text + "image: rig/dynamo-mocker:test\nsetup: {post_install: setup/look.sh}\n"
        (swf / "recipes" / f"{name}.yaml").write_text(out[name])
    return out


def test_a_container_sees_only_its_mounts_and_paths_are_checked_on_their_side(swf, batch):
    """Through the rig's isolation: the model (container side, /models) reaches the engines, the trace
    (container side, /traces) reaches aiperf on the host through its mount; the host's site directory
    is invisible inside; a path on the wrong side fails pre-flight naming it and its side."""
    site = swf.parent / "site"
    r, targets = batch, [f"results/{n}/c2.json" for n in CONTAINER_VARIANTS]
    assert r.returncode != 0
    assert (swf / targets[0]).exists(), r.stdout[-3000:] + r.stderr[-3000:]
    log = (stack_logs(swf, targets[0]) / "agg-0.log").read_text()
    assert "rig: host site hidden" in log and "servesweep: versions" in log
    reason = json.loads((swf / "logs/slurm-container-host-model/c2/failure.json").read_text())["reason"]
    assert f"model.path: {site}/models/tiny-llama is a host path" in reason and "/models:ro" in reason, reason
    reason = json.loads((swf / "logs/slurm-container-lost-trace/c2/failure.json").read_text())["reason"]
    assert "/traces/nowhere/local-sessions.jsonl does not exist on the host, where aiperf reads it" in reason

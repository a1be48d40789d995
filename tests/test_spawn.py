"""Spawn: rendered srun lines (pyxis flags), runtime references, the step script's GPU mapping."""

from __future__ import annotations

import dataclasses
import os
import subprocess
from pathlib import Path

from servesweep.contract.plan import Plan
from servesweep.fileio.encode import canonical
from servesweep.run.spawn import STEP_WRAPPER, Context, SrunSpawner

from helpers import ETCD_TLS_ENV, STACK_CREDENTIALS, plan_of


def typed(name, conc=None) -> Plan:
    return Plan.from_json(plan_of(name, conc))


def ctx_for(plan: Plan, names=None, shift=0):
    n = plan.nodes
    names = names or [f"node{i:02d}" for i in range(n)]
    procs = {p.name: p for p in plan.processes}
    ips = [f"10.0.0.{i + 1}" for i in range(n)]
    creds = STACK_CREDENTIALS
    return Context(
        ips, names, shift, "4242", Path("/work/wf/logs/x/c1"), procs, workdir=Path("/work/wf"), credentials=creds
    )


def test_srun_lines_for_a_container_recipe():
    plan = typed("gemma4-livekit-2tp4-dyn-vllm-prod", 96)
    ctx = ctx_for(plan)
    sp = SrunSpawner(plan.container)
    agg1 = plan.process("agg-1")
    cmd = sp.command(agg1, ctx.argv(agg1), ctx)
    i = cmd.index("/bin/sh")
    srun = cmd[:i]
    assert srun[:5] == ["srun", "--overlap", "--nodes=1", "--ntasks=1", "--nodelist=node00"]
    assert (
        "--container-image=vcr.vngcloud.vn/108942-public69/dynamo-stack/vllm-runtime:0.31.0-dyn1.6.0-g4p2-prod" in srun
    )
    # each pyxis step is its own container: the workflow dir (run dir, logs, caches) is mounted in every step
    assert "--container-mounts=/lustre/models:/models:ro,/lustre/traces:/traces:ro,/work/wf:/work/wf" in srun
    assert "--container-workdir=/work/wf" in srun
    assert "--no-container-entrypoint" in srun and "--no-container-mount-home" in srun
    for p in plan.processes:  # every step of the stack, the control plane included
        line = sp.command(p, ctx.argv(p), ctx)
        assert any(a.startswith("--container-mounts=") and a.endswith(",/work/wf:/work/wf") for a in line), p.name
    argv = cmd[i + len(STEP_WRAPPER) :]
    assert argv[1] == "/work/wf/logs/x/c1/preamble.py" and argv[argv.index("--") + 1 :][:3] == [
        "python3",
        "-m",
        "dynamo.vllm",
    ]
    assert argv[argv.index("--model") + 1] == "/models/gemma-4-31b-it"


def test_multi_node_processes_go_to_their_nodes_and_reach_each_other_by_address():
    plan = typed("dsv4-pro-gb300-1p1d-pdep8-ddep8-mtp")
    names = ["gb-a", "gb-b", "gb-c", "gb-d"]
    ctx = ctx_for(plan, names, shift=512)
    sp = SrunSpawner(plan.container)
    by = {p.name: p for p in plan.processes}
    for name, node in [
        ("frontend", "gb-a"),
        ("prefill-0-n1", "gb-b"),
        ("decode-0-n0", "gb-c"),
        ("decode-0-n1", "gb-d"),
    ]:
        cmd = sp.command(by[name], ctx.argv(by[name]), ctx)
        assert f"--nodelist={node}" in cmd
    argv = ctx.argv(by["prefill-0-n1"])
    assert argv[argv.index("--data-parallel-address") + 1] == "10.0.0.1"
    leader_rpc = by["prefill-0-n0"].ports["dp_rpc"].port + 512
    assert argv[argv.index("--data-parallel-rpc-port") + 1] == str(leader_rpc)
    env, secret = ctx.env(by["decode-0-n0"], base={}, rehearsal=True)
    assert env["DYN_TCP_RPC_HOST"] == "10.0.0.3" and env["DG_JIT_CACHE_DIR"] == "/tmp/dg-cache-4242"
    # discovery over the network: etcd on node 0, never a shared directory
    assert env["ETCD_ENDPOINTS"] == f"https://10.0.0.1:{by['etcd'].ports['client'].port + 512}"
    assert "DYN_FILE_KV" not in env
    assert env["DYN_NAMESPACE"] == ctx.namespace
    assert "HF_TOKEN" not in env and secret == ETCD_TLS_ENV  # rehearsal: only the stack's own


def test_secret_by_reference_resolves_only_at_spawn(monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_abc")  # set before rendering: rendering must not read it
    doc = plan_of("dsv4-pro-gb300-1p1d-pdep8-ddep8-mtp")
    plan = Plan.from_json(doc)
    env, secret = ctx_for(plan).env(plan.process("prefill-0-n0"), base={})
    assert env["HF_TOKEN"] == "hf_abc" and secret == {"HF_TOKEN", *ETCD_TLS_ENV}
    assert "hf_abc" not in canonical(doc)


def test_hostile_strings_stay_single_argv_items():
    plan = typed("local-agg-2x-mocker", 4)
    hostile = "x; rm -rf / $(id) `id` 'q\"\nline"
    agg = plan.process("agg-0")
    proc = dataclasses.replace(agg, argv=(*agg.argv, "--served-name", hostile))
    cmd = SrunSpawner(None).command(proc, ctx_for(plan).argv(proc), ctx_for(plan))
    assert cmd[-1] == hostile and cmd.count(hostile) == 1


def _step(env: dict, probe: str = 'echo "got=$CUDA_VISIBLE_DEVICES"') -> str:
    out = subprocess.run(
        [*STEP_WRAPPER, "/bin/sh", "-c", probe],
        env={"PATH": os.environ["PATH"], **env},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return out.strip().splitlines()[-1]


def test_step_script_maps_plan_slices_onto_slurm_gpus():
    assert _step({"SERVESWEEP_GPUS": "1,3", "CUDA_VISIBLE_DEVICES": "4,5,6,7"}) == "got=5,7"
    assert _step({"SERVESWEEP_GPUS": "0,1,2,3", "CUDA_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7"}) == "got=0,1,2,3"
    assert _step({"SERVESWEEP_GPUS": "none", "CUDA_VISIBLE_DEVICES": "0,1"}) == "got="
    assert _step({"SERVESWEEP_GPUS": "2"}) == "got=2"  # no Slurm GPU list: the plan's ids as they are


def test_the_rig_container_mounts_its_private_tmp_before_anything_under_it():
    from pathlib import Path

    from servesweep.run.spawn import Context, bwrap_prefix

    ctx = Context(["127.0.0.1"], ["n1"], 0, "1", Path("/tmp/w/logs/x"), {}, workdir=Path("/tmp/w"))
    container = {
        "runtime": "bwrap",
        "base": ["/usr", "/tmp/w-venvs"],
        "mounts": ["/tmp/site:/models:ro", "{workdir}:{workdir}"],
    }
    argv = bwrap_prefix(container, ctx, "agg-0")
    tmp = argv.index("--tmpfs")
    assert argv[tmp + 1] == "/tmp" and all(i > tmp for i, a in enumerate(argv) if a in ("--ro-bind", "--bind"))
    assert argv[-3:] == ["--chdir", "/tmp/w", "--"] and ["--ro-bind", "/tmp/site", "/models"] == argv[-9:-6]

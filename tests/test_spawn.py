"""Spawn: rendered srun lines (pyxis flags), runtime references, the step script's GPU mapping."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from servesweep.spawn import STEP_WRAPPER, Context, SrunSpawner

from test_plans import plan_of


def ctx_for(plan, names=None, shift=0):
    n = plan["nodes"]
    names = names or [f"node{i:02d}" for i in range(n)]
    procs = {p["name"]: p for p in plan["processes"]}
    return Context([f"10.0.0.{i + 1}" for i in range(n)], names, shift, "4242", Path("/runs/x"), procs)


def test_srun_lines_for_a_container_recipe():
    plan = plan_of("gemma4-livekit-2tp4-dyn-vllm-prod", 96)
    ctx = ctx_for(plan)
    sp = SrunSpawner(plan["container"])
    agg1 = plan["processes"][2]
    cmd = sp.command(agg1, ctx.argv(agg1), ctx)
    i = cmd.index("/bin/sh")
    srun = cmd[:i]
    assert srun[:5] == ["srun", "--overlap", "--nodes=1", "--ntasks=1", "--nodelist=node00"]
    assert (
        "--container-image=vcr.vngcloud.vn/108942-public69/dynamo-stack/vllm-runtime:0.31.0-dyn1.6.0-g4p2-prod" in srun
    )
    assert "--container-mounts=/lustre/models:/models:ro,/lustre/traces:/traces:ro" in srun
    assert "--no-container-entrypoint" in srun and "--no-container-mount-home" in srun
    argv = cmd[i + len(STEP_WRAPPER) :]
    assert argv[:3] == ["python3", "-m", "dynamo.vllm"]
    assert argv[argv.index("--model") + 1] == "/models/gemma-4-31b-it"


def test_multi_node_processes_go_to_their_nodes_and_reach_each_other_by_address():
    plan = plan_of("dsv4-pro-gb300-1p1d-pdep8-ddep8-mtp")
    names = ["gb-a", "gb-b", "gb-c", "gb-d"]
    ctx = ctx_for(plan, names, shift=512)
    sp = SrunSpawner(plan["container"])
    by = {p["name"]: p for p in plan["processes"]}
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
    leader_rpc = by["prefill-0-n0"]["ports"]["dp_rpc"]["port"] + 512
    assert argv[argv.index("--data-parallel-rpc-port") + 1] == str(leader_rpc)
    env, secret = ctx.env(by["decode-0-n0"], base={}, rehearsal=True)
    assert env["DYN_TCP_RPC_HOST"] == "10.0.0.3" and env["DG_JIT_CACHE_DIR"] == "/tmp/dg-cache-4242"
    assert env["DYN_FILE_KV"] == "/runs/x/discovery"
    assert "HF_TOKEN" not in env and not secret  # rehearsal: no credentials needed


def test_secret_by_reference_resolves_only_at_spawn(monkeypatch):
    plan = plan_of("dsv4-pro-gb300-1p1d-pdep8-ddep8-mtp")
    ctx = ctx_for(plan)
    monkeypatch.setenv("HF_TOKEN", "hf_abc")
    env, secret = ctx.env(plan["processes"][1], base={})
    assert env["HF_TOKEN"] == "hf_abc" and secret == {"HF_TOKEN"}
    assert "hf_abc" not in str(plan)


def test_hostile_strings_stay_single_argv_items():
    plan = plan_of("local-agg-2x-mocker", 4)
    hostile = "x; rm -rf / $(id) `id` 'q\"\nline"
    proc = dict(plan["processes"][1], argv=[*plan["processes"][1]["argv"], "--served-name", hostile])
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

"""Engine kinds are plug-ins: every plan is what it was before they were, kind names live only in
the kinds' folder, and a new kind is one module (rendered, validated and rehearsed with no other
file changed)."""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import io
import json
import os
import subprocess
import sys
import tokenize
from pathlib import Path

import pytest
import yaml

from servesweep.fileio.errors import InputError
from servesweep.render import flags, kinds
from servesweep.render.cluster import load_cluster_file
from servesweep.render.loading import load_recipe, load_recipes
from servesweep.render.plan import render

from helpers import CLUSTERS, ROOT, copy_workflow, no_processes_left, snakemake

PKG = ROOT / "scripts" / "servesweep"
GOLDEN = ROOT / "tests" / "golden" / "plan-digests.json"
# the kinds there were when the plug-ins came; every recipe is rendered as each of them
GOLDEN_KINDS = ["vllm", "sglang", "dynamo.vllm", "dynamo.sglang", "dynamo.trtllm", "dynamo.mocker"]


def _normal(plan: dict, rehearsal: bool = False) -> str:
    """A plan without what the plug-in change itself added (version, the kind's prefix reset), what
    follows from the rest (fingerprints), and what later changes added on purpose (request-plane TLS,
    the scheduler limits a rehearsal's mockers keep)."""
    p = {k: v for k, v in plan.items() if k not in ("schema", "fingerprints", "data", "model_data")}  # data: #48
    if "stack" in p:
        p["stack"] = {k: v for k, v in p["stack"].items() if k != "prefix_reset"}
    if "benchmark" in p:  # aiperf's locked scenarios came after (issue #37)
        p["benchmark"] = {k: v for k, v in p["benchmark"].items() if k not in ("aiperf_scenario", "scenario_override")}
    if "server_metrics" in p:  # speculative-decoding counters named (issue #37)
        p["server_metrics"] = {k: v for k, v in p["server_metrics"].items() if k != "spec_decode"}
    if "validity" in p:  # expected log lines (issue #39)
        p["validity"] = {k: v for k, v in p["validity"].items() if k != "expect_log"}
    if "discovery" in p:  # TLS recorded as a choice (issue #37)
        p["discovery"] = {k: v for k, v in p["discovery"].items() if k != "request_plane_tls"}
    for proc in p.get("processes", []):  # the request plane's mutual TLS came after (issue #23)
        proc["env"] = {k: v for k, v in proc["env"].items() if not k.startswith("DYN_TCP_TLS_")}
        _with_mocker_zmq_relay(proc)
        if rehearsal and "dynamo.mocker" in proc.get("argv", []):
            _without_rehearsed_limits(proc)
    return hashlib.sha256(json.dumps(p, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:16]


def _without_rehearsed_limits(proc: dict) -> None:
    """A rehearsal's mockers dropped every engine argument until they kept the scheduler limits they
    simulate (issue #49): take those out again (each flag with its value, when it has one)."""
    limits = {f for k in kinds.KINDS.values() for f in k.rehearsal_flags.values()}
    argv, out, i = proc.get("argv", []), [], 0
    while i < len(argv):
        if argv[i] in limits:
            has_value = i + 1 < len(argv) and not str(argv[i + 1]).startswith("--")
            i += 2 if has_value else 1
            continue
        out.append(argv[i])
        i += 1
    proc["argv"] = out


def _with_mocker_zmq_relay(proc: dict) -> None:
    """The mocker's ZMQ KV-event relay (binds every interface) was dropped later (issue #23): put it
    back as it was, so nothing else may differ."""
    argv = proc.get("argv", [])
    if "dynamo.mocker" in argv and "kv_events" in proc.get("ports", {}):
        i = argv.index("--event-plane") + 2
        i += 2 if argv[i : i + 1] == ["--data-parallel-size"] else 0
        proc["argv"] = argv[:i] + ["--zmq-kv-events-ports", "{rank_port:self.kv_events}"] + argv[i:]


def _all_plans() -> dict[str, str]:
    clusters = {**CLUSTERS, "slurm-test": load_cluster_file(ROOT / "tests/slurm/profile/cluster.yaml")}
    files = sorted((ROOT / "recipes").glob("*.yaml")) + sorted((ROOT / "tests/slurm/recipes").glob("*.yaml"))
    out = {}
    for f in files:
        base = load_recipe(f, str(f.relative_to(ROOT)))  # the label as the workflow gives it
        if "sweep" in base.doc:
            continue  # a sweep's plans are its variants' (tests/test_sweeps.py), added after these digests
        for kind in GOLDEN_KINDS:
            doc = copy.deepcopy(base.doc)
            doc["engine"]["kind"] = kind
            r = dataclasses.replace(base, doc=doc)
            for cluster in r.clusters:
                for conc in r.concurrency[:2]:
                    for rehearsal in (False, True) if cluster != "local" else (False,):
                        try:
                            plan = render(r, clusters[cluster], conc, CLUSTERS["local"] if rehearsal else None)
                        except InputError as e:
                            plan = {"error": str(e)}
                        out[f"{r.name}|{kind}|{cluster}|{conc}|{int(rehearsal)}"] = _normal(plan, rehearsal)
    return out


def test_every_plan_is_the_one_rendered_before_kinds_were_plugins():
    """Every recipe (production, local, Slurm rig) as every kind, on each of its clusters, rehearsed
    too: the same plan as before (digests taken from the code before the change; taken again when
    the system ports went behind a per-node sysguard, issue #23, after checking by hand that the
    plans differed only in the sysguards, the loopback system ports and the port numbers after them;
    and for the four DSV4 recipes when they moved to aiperf's AgentX scenario and the router's expiry
    to the frontend, issue #37, checked by hand to differ only in those; and for the recipes whose
    speculative config changed: the MTP ones' synthetic rejection sampling, the CPU vLLM's n-gram drafter;
    and for the etcd stacks when etcd went to mutual TLS with its peer port on loopback, issue #40, checked
    by hand to differ only in etcd's argv, URLs and the processes' ETCD_* env)."""
    want = json.loads(GOLDEN.read_text())
    got = _all_plans()
    assert set(got) == set(want)
    changed = sorted(k for k in want if got[k] != want[k])
    assert not changed, changed[:10]


def _string_literals(path: Path):
    for tok in tokenize.generate_tokens(io.StringIO(path.read_text()).readline):
        if tok.type == tokenize.STRING:
            try:
                yield tok.start[0], eval(tok.string, {})  # noqa: S307 - a literal from our own source
            except (SyntaxError, ValueError, NameError, TypeError):
                continue  # f-strings with fields


def test_kind_names_appear_only_in_the_kinds_folder():
    names = set(kinds.names())
    assert set(GOLDEN_KINDS) <= names
    hits = [
        f"{f.relative_to(PKG)}:{line}: {value!r}"
        for f in sorted(PKG.rglob("*.py"))
        if "kinds" not in f.relative_to(PKG).parts
        for line, value in _string_literals(f)
        if value in names
    ]
    assert not hits, hits


TOY = '''"""A toy engine: served under Dynamo, launched as its own module."""

from . import _dynamo
from .base import EngineKind


def _render(e, ports, env):
    argv = [e.python, "-m", "toy_engine", "--model", e.doc["model"]["path"], *e.planes.flags()]
    return argv + _dynamo.role_flags(e) + e.user_args, False


KIND = EngineKind(
    name="toy",
    process=_dynamo.process(_render),
    dynamo=True,
    distributions=(),
    metrics={**_dynamo.METRICS, "batch": None},
)
'''


@pytest.mark.integration
def test_a_toy_kind_is_one_module(tmp_path):
    """Copy the workflow, add one module, and a recipe of that kind renders, validates and rehearses."""
    wf = copy_workflow(tmp_path / "wf", ["gemma4-livekit-2tp4-dyn-vllm-prod"])
    (wf / "scripts/servesweep/render/kinds/toy.py").write_text(TOY)
    doc = yaml.safe_load((wf / "recipes/gemma4-livekit-2tp4-dyn-vllm-prod.yaml").read_text())
    doc.update(name="toy-2x", engine={"kind": "toy"})
    (wf / "recipes/toy-2x.yaml").write_text(yaml.safe_dump(doc))
    env = {"PYTHONPATH": str(wf / "scripts")}  # the copy's package, not the checkout's

    def cli(*args):
        cmd = [sys.executable, "-m", "servesweep", *args]
        return subprocess.run(cmd, cwd=wf, capture_output=True, text=True, timeout=120, env={**os.environ, **env})

    checked = cli("validate", "recipes/toy-2x.yaml")
    plan = cli("plan", "recipes/toy-2x.yaml", "--conc", "96")
    assert checked.returncode == 0 and "(toy;" in checked.stdout, checked.stdout + checked.stderr
    assert "toy NOT parser-checked: the toy kind declares no parser check" in checked.stdout
    assert plan.returncode == 0, plan.stderr
    argvs = [p["argv"] for p in json.loads(plan.stdout)["processes"] if p["role"] == "agg"]
    assert len(argvs) == 2 and all("toy_engine" in a for a in argvs)
    target = "results/rehearsal/toy-2x/c96.json"
    with no_processes_left(wf):
        run = snakemake(wf, target, "--config", "cluster=hcm-hgx02", "rehearsal=1", env=env, timeout=420)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    result = json.loads((wf / target).read_text())
    assert result["identity"]["recipe_engine"] == "toy" and result["identity"]["engine"] == "dynamo.mocker"


def test_a_misspelt_kind_in_cluster_facts_names_the_field_and_the_kind_meant(tmp_path):
    facts = yaml.safe_load((ROOT / "profiles/local/cluster.yaml").read_text())
    facts["engine_pythons"] = {"dynamo.vlm": ".venvs/engine/bin/python"}
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(facts))
    _, (problem,) = load_recipes([], {"x": load_cluster_file(path, "profiles/x/cluster.yaml")})
    assert problem.field == "engine_pythons.dynamo.vlm" and "did you mean 'dynamo.vllm'" in problem.reason


def test_a_rehearsal_keeps_the_scheduler_limits_its_mockers_simulate():
    """The mocker takes vLLM's batch limits under their own names and SGLang's and TRT-LLM's renamed;
    every other engine argument is dropped (the tiny model cannot take them)."""
    assert flags.rehearsal_args(
        "dynamo.vllm", ["--max-num-batched-tokens", 4096, "--long-prefill-token-threshold", "2048"]
    ) == [
        "--max-num-batched-tokens",
        "4096",
    ]
    sglang = [
        "--chunked-prefill-size=-1",
        "--max-running-requests",
        "64",
        "--disable-radix-cache",
        "--mem-fraction-static",
        "0.8",
    ]
    want = ["--no-enable-chunked-prefill", "--max-num-seqs", "64", "--no-enable-prefix-caching"]
    assert flags.rehearsal_args("sglang", sglang) == want
    assert flags.rehearsal_args("dynamo.sglang", ["--chunked-prefill-size", "8192"]) == [
        "--max-num-batched-tokens",
        "8192",
    ]
    # a switch keeps no value (the token after it is another argument); vLLM's underscore spelling;
    # SGLang's -1 is no chunking; a limit that is no integer is left to the engine's own check
    odd = ["--no-enable-prefix-caching", "-O3", "--max_num_seqs", "8", "--enable-chunked-prefill", False]
    assert flags.rehearsal_args("vllm", odd) == [
        "--no-enable-prefix-caching",
        "--max-num-seqs",
        "8",
        "--enable-chunked-prefill",
    ]
    assert flags.rehearsal_args("sglang", ["--chunked-prefill-size", "-1"]) == ["--no-enable-chunked-prefill"]
    assert flags.rehearsal_args("vllm", ["--max-num-seqs=--5", "--max-num-batched-tokens"]) == []
    assert flags.rehearsal_args("dynamo.trtllm", ["--max-num-tokens", "8192", "--max-batch-size", "32"]) == [
        "--max-num-batched-tokens",
        "8192",
        "--max-num-seqs",
        "32",
    ]


def test_a_tuning_sweeps_batched_tokens_axis_reaches_its_rehearsal_mockers():
    """Seed 000's tuning sweep rehearsed: each `--max-num-batched-tokens` value is its mockers' own (the
    rehearsal measures the axis instead of repeating one configuration three times)."""
    sweep, problems = load_recipes([ROOT / "recipes" / "gemma4-livekit-tune-c150.yaml"], CLUSTERS, root=ROOT)
    assert not problems and len(sweep) == 12, problems
    seen = {}
    for r in sweep:
        plan = render(r, CLUSTERS["hcm-hgx02"], 150, CLUSTERS["local"])
        mockers = [p["argv"] for p in plan["processes"] if "dynamo.mocker" in p["argv"]]
        assert mockers and all("--long-prefill-token-threshold" not in a for a in mockers), r.name
        (value,) = {a[a.index("--max-num-batched-tokens") + 1] for a in mockers}
        seen[r.name] = value
    assert all(f"mnbt-{v}_" in name for name, v in seen.items()), seen


def test_a_disaggregated_rehearsal_keeps_each_roles_own_limits():
    """Seed 002's 3P1D: the prefill workers' `--max-num-batched-tokens 16384` and the decode worker's
    `--max-num-seqs 512` reach their own mockers in the rehearsal, and only theirs."""
    (r,) = load_recipes([ROOT / "recipes" / "dsv4-pro-gb200-3p1d-pdep8-ddep16-pergpu.yaml"], CLUSTERS, root=ROOT)[0]
    plan = render(r, CLUSTERS[r.clusters[0]], r.concurrency[0], CLUSTERS["local"])
    mockers = {p["role"]: p["argv"] for p in plan["processes"] if "dynamo.mocker" in p["argv"]}
    assert mockers["prefill"][-2:] == ["--max-num-batched-tokens", "16384"], mockers["prefill"][-6:]
    assert mockers["decode"][-2:] == ["--max-num-seqs", "512"], mockers["decode"][-6:]
    assert "--max-num-seqs" not in mockers["prefill"] and "--max-num-batched-tokens" not in mockers["decode"]

"""The shipped recipes validate and expand as the issue states; rendering is pure and deterministic."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from servesweep.contract.plan import command_of
from servesweep.fileio.encode import canonical
from servesweep.render.plantext import CLIENT_KEYS

from helpers import CLUSTERS, ROOT, copy_workflow, plan_of, servesweep


def roles(plan):
    return Counter(p["role"] for p in plan["processes"])


def all_ports(plan, node=None):
    """Every port bound (on one node, or in the whole plan)."""
    out = []
    for p in plan["processes"]:
        if node is None or p["node"] == node:
            for b in p["ports"].values():
                out += range(b["port"] + b["offset"], b["port"] + b["offset"] + b["width"])
    return out


def test_every_shipped_recipe_validates_via_cli():
    r = servesweep("validate", cwd=ROOT)
    assert r.returncode == 0, r.stderr
    files = {ln.split()[1] for ln in r.stdout.splitlines() if ln.startswith("ok  ")}  # a sweep: a line per variant
    assert len(files) == len(list((ROOT / "recipes").glob("*.yaml")))


def test_gemma4_two_tp4_replicas_on_one_node():
    p = plan_of("gemma4-livekit-2tp4-dyn-vllm-prod", 96)
    assert p["topology"]["nodes"] == 1 and p["topology"]["gpus"] == 8
    engines = [x for x in p["processes"] if x["role"] == "agg"]
    assert [e["env"]["CUDA_VISIBLE_DEVICES"] for e in engines] == ["0,1,2,3", "4,5,6,7"]
    sys_ports = {e["ports"]["system"]["port"] for e in engines}
    kv = {e["ports"]["kv_events"]["port"] for e in engines}
    assert len(sys_ports) == 2 and len(kv) == 2
    for e in engines:
        cfg = json.loads(e["argv"][e["argv"].index("--kv-events-config") + 1])
        assert e["ports"]["kv_events"]["count"] == 1  # dp 1: a block of one
        assert cfg["endpoint"] == "tcp://127.0.0.1:{port:self.kv_events}"  # loopback: only dynamo.vllm subscribes
        assert command_of(e["argv"])[:3] == ["python3", "-m", "dynamo.vllm"]
        assert e["argv"][e["argv"].index("--tensor-parallel-size") + 1] == "4"
        assert e["env"]["DYN_PARSER_VERSION"] == "2"
        assert "--max-num-batched-tokens" in e["argv"] and "--prefix-cache-retention-interval" in e["argv"]
    (fe,) = [x for x in p["processes"] if x["role"] == "frontend"]
    assert fe["env"]["DYN_PARSER_VERSION"] == "2"
    assert "CUDA_VISIBLE_DEVICES" not in fe["env"] and "DYN_SYSTEM_PORT" not in fe["env"]
    assert set(fe["ports"]) == {"http"}
    argv = fe["argv"]
    for flag, value in [
        ("--router-mode", "kv"),
        ("--router-prefill-load-scale", "16"),
        ("--router-min-initial-workers", "2"),
        ("--router-session-affinity-ttl-secs", "1800"),
        ("--router-session-affinity-mode", "hard"),
    ]:
        assert argv[argv.index(flag) + 1] == value
    assert p["expect_registrations"] == {"backend": 2}
    assert p["benchmark"]["session_header"] == "x-dynamo-session-id"
    assert p["benchmark"]["duration_s"] == 1200 and p["benchmark"]["warmup"]["requests"] > 0
    assert p["container"]["image"].endswith("vllm-runtime:0.31.0-dyn1.6.0-g4p2-prod")
    assert p["resources"] == {
        "nodes": 1,
        "gpus_per_node": 8,
        "exclusive": True,
        "runtime_min": p["resources"]["runtime_min"],
        "startup_s": 1800,  # readiness timeout 1200 + margin 600: paid once per stack
        "point_s": 1290,  # warm-up 60 + duration 1200 + aiperf grace 30: paid per point
        "cpus_per_task": 96,
        "mem_mb": 1500000,
    }
    assert "slo" not in p  # a reporting setting: it lives in the selection, not the plan
    assert roles(p) == {"etcd": 1, "frontend": 1, "sysguard": 1, "agg": 2}  # one sysguard per node
    assert p["discovery"]["backend"] == "etcd"  # Slurm: the network backend even on one node


@pytest.mark.parametrize(
    "name,nodes,prefill,decode,expect",
    [
        ("dsv4-pro-gb300-1p1d-pdep8-ddep8-mtp", 4, 2, 2, {"prefill": 2, "backend": 2}),
        ("dsv4-pro-gb300-3p1d-pdep8-ddep16", 10, 6, 4, {"prefill": 6, "backend": 4}),
        ("dsv4-pro-gb200-3p1d-pdep8-ddep16-pergpu", 10, 24, 16, {"prefill": 24, "backend": 16}),
    ],
)
def test_dsv4_disaggregated_expansions(name, nodes, prefill, decode, expect):
    p = plan_of(name)
    assert p["topology"]["nodes"] == nodes and p["resources"]["nodes"] == nodes
    # the Mooncake store their MooncakeStoreConnector needs: one kvstore process beside etcd
    want = {"etcd": 1, "kvstore": 1, "frontend": 1, "sysguard": nodes, "prefill": prefill, "decode": decode}
    assert roles(p) == want
    store = p["processes"][1]
    assert store["role"] == "kvstore" and store["node"] == 0 and store["argv"][0] == "mooncake_master"
    for w in (x for x in p["processes"] if x["role"] in ("prefill", "decode")):
        assert w["env"]["MOONCAKE_MASTER"] == "{addr:kvstore}:{port:kvstore.rpc}"
        assert w["env"]["MOONCAKE_PROTOCOL"] == "rdma" and w["env"]["MOONCAKE_LOCAL_HOSTNAME"] == "{addr:self}"
    assert p["expect_registrations"] == expect
    assert p["resources"]["gpus_per_node"] == 4 and p["resources"]["exclusive"]
    engines = [x for x in p["processes"] if x["role"] in ("prefill", "decode")]
    # identical attention config and job-scoped cache dir on both roles
    attn = {x["argv"][x["argv"].index("--attention-config") + 1] for x in engines}
    assert len(attn) == 1
    assert json.loads(attn.pop())["backend"] == "FLASHINFER_MLA_SPARSE_DSV4"
    assert {x["env"]["DG_JIT_CACHE_DIR"] for x in engines} == {"/tmp/dg-cache-{job_id}"}
    for x in engines:
        assert x["env"]["PYTHONHASHSEED"] == "0" and x["env"]["TORCH_SYMMEM"] == "NVSHMEM"
        assert x["env"]["NCCL_IB_HCA"] == "mlx5_0,mlx5_1,mlx5_2,mlx5_3"  # placeholder filled by the cluster
        assert x["env"]["HF_TOKEN"] == {"from_env": "HF_TOKEN", "secret": True}
        assert "--block-size" in x["argv"]
        json.loads(x["argv"][x["argv"].index("--kv-transfer-config") + 1])
        assert "--enable-expert-parallel" in x["argv"]
    # every node holds at most 4 GPUs, and no GPU is used twice on a node
    per_node = Counter()
    for x in engines:
        for g in x["gpus"]:
            per_node[(x["node"], g)] += 1
    assert max(per_node.values()) == 1 and max(g for _, g in per_node) == 3
    assert len(set(all_ports(p))) == len(all_ports(p))
    mtp = any("--speculative-config" in x["argv"] for x in engines)
    assert mtp == name.endswith("-mtp")


def test_per_node_layout_of_dep8():
    p = plan_of("dsv4-pro-gb300-1p1d-pdep8-ddep8-mtp")
    pre = [x for x in p["processes"] if x["role"] == "prefill"]
    assert [x["name"] for x in pre] == ["prefill-0-n0", "prefill-0-n1"]
    assert [x["node"] for x in pre] == [0, 1]
    a0, a1 = pre[0]["argv"], pre[1]["argv"]
    assert a0[a0.index("--data-parallel-size") + 1] == "8"
    assert a0[a0.index("--data-parallel-size-local") + 1] == "4"
    assert [a[a.index("--data-parallel-start-rank") + 1] for a in (a0, a1)] == ["0", "4"]
    # hybrid load balancing: no headless node, every node registers and publishes its own ranks
    assert "--headless" not in a0 + a1 and "--data-parallel-hybrid-lb" in a0 and "--data-parallel-hybrid-lb" in a1
    for a in (a0, a1):
        assert a[a.index("--data-parallel-address") + 1] == "{addr:prefill-0-n0}"
        assert a[a.index("--data-parallel-rpc-port") + 1] == "{port:prefill-0-n0.dp_rpc}"
    assert [x["registers"] for x in pre] == [{"prefill": 1}, {"prefill": 1}]
    assert all(x["health_url"] for x in pre)
    assert [(x["ports"]["kv_events"]["offset"], x["ports"]["kv_events"]["width"]) for x in pre] == [(0, 4), (4, 4)]


def test_per_gpu_processes_have_one_gpu_and_a_rank():
    p = plan_of("dsv4-pro-gb200-3p1d-pdep8-ddep16-pergpu")
    dec = [x for x in p["processes"] if x["role"] == "decode"]
    assert all(len(x["gpus"]) == 1 for x in dec)
    ranks = sorted(int(x["argv"][x["argv"].index("--data-parallel-rank") + 1]) for x in dec)
    assert ranks == list(range(16))
    assert {x["node"] for x in dec} == {6, 7, 8, 9}
    for x in dec:  # every rank knows where rank 0 is, also on other nodes
        assert x["argv"][x["argv"].index("--data-parallel-address") + 1] == "{addr:decode-0-r0}"
        assert x["argv"][x["argv"].index("--data-parallel-rpc-port") + 1] == "{port:decode-0-r0.dp_rpc}"


def test_local_recipes_render_mocker_stacks():
    agg = plan_of("local-agg-2x-mocker", 4)
    assert roles(agg) == {"frontend": 1, "agg": 2, "sysguard": 1}
    assert agg["expect_registrations"] == {"backend": 2}
    assert agg["discovery"]["backend"] == "file"  # one host: Dynamo's file store is enough
    assert command_of(agg["processes"][1]["argv"])[:3] == [".venvs/engine/bin/python", "-m", "dynamo.mocker"]
    dis = plan_of("local-disagg-1p1d-mocker", 4)
    assert roles(dis) == {"frontend": 1, "prefill": 1, "decode": 1, "sysguard": 1}
    assert dis["expect_registrations"] == {"backend": 1, "prefill": 1}
    dec = dis["processes"][2]
    assert dec["argv"][dec["argv"].index("--data-parallel-size") + 1] == "2"
    assert dec["ports"]["kv_events"]["count"] == 2  # one KV-event port per DP rank


def test_rendering_is_deterministic_and_fingerprinted():
    a = canonical(plan_of("dsv4-pro-gb300-3p1d-pdep8-ddep16"))
    b = canonical(plan_of("dsv4-pro-gb300-3p1d-pdep8-ddep16"))
    assert a == b
    p1, p2 = plan_of("local-agg-2x-mocker", 4), plan_of("local-agg-2x-mocker", 16)
    assert p1["fingerprints"]["plan"] != p2["fingerprints"]["plan"]
    assert p1["fingerprints"]["curve"] == p2["fingerprints"]["curve"]


def test_sweep_text_is_the_canonical_plan_and_fingerprints_hash_it():
    """The sweep builds each plan's text from per-recipe JSON fragments; it must be byte-for-byte
    what encoding the plan gives, and the fingerprints must hash what they say they hash."""
    import hashlib

    from servesweep.workflow.selection import Selection

    def digest(obj):
        return hashlib.sha256(canonical(obj).encode()).hexdigest()[:16]

    for cluster in CLUSTERS:
        sel = Selection(ROOT, cluster)
        for rehearsal in (False, True):
            for p in sel.points:
                plan, text = sel.index._render(p.recipe, p.conc, rehearsal)
                assert text == canonical(plan)
                body = {k: v for k, v in plan.items() if k != "fingerprints"}
                curve = {k: v for k, v in body.items() if k not in ("concurrency", "point")}
                curve["benchmark"] = {k: v for k, v in body["benchmark"].items() if k != "concurrency"}
                server = {k: v for k, v in body.items() if k not in CLIENT_KEYS}
                assert plan["fingerprints"] == {"plan": digest(body), "curve": digest(curve), "server": digest(server)}


def test_plan_command_prints_the_documented_shape():
    r = servesweep("plan", "recipes/dsv4-pro-gb300-1p1d-pdep8-ddep8-mtp.yaml", "--cluster", "gb300", "--conc", "384")
    assert r.returncode == 0, r.stderr
    p = json.loads(r.stdout)
    assert p["topology"]["nodes"] == 4 and p["topology"]["gpus"] == 16
    for proc in p["processes"]:
        assert {"name", "role", "node", "gpus", "ports", "env", "argv"} <= set(proc)
        assert isinstance(proc["argv"], list) and all(isinstance(a, str) for a in proc["argv"])


def test_rehearsal_keeps_layout_but_runs_mockers():
    real = plan_of("dsv4-pro-gb300-1p1d-pdep8-ddep8-mtp")
    reh = plan_of("dsv4-pro-gb300-1p1d-pdep8-ddep8-mtp", rehearsal=True)
    assert [(x["name"], x["node"], x["gpus"]) for x in real["processes"]] == [
        (x["name"], x["node"], x["gpus"]) for x in reh["processes"]
    ]
    assert reh["expect_registrations"] == real["expect_registrations"]
    assert reh["image"] is None and reh["launcher"] == "local" and reh["rehearsal"]
    assert reh["benchmark"]["concurrency"] <= CLUSTERS["local"].rehearsal_max_concurrency
    assert reh["benchmark"]["duration_s"] <= CLUSTERS["local"].rehearsal_max_duration_s
    guards = [x for x in reh["processes"] if x["role"] == "sysguard"]
    assert [x["node"] for x in guards] == list(range(reh["topology"]["nodes"]))
    assert all(x["argv"][1].endswith("/run/sysguard.py") for x in guards)
    others = [x for x in reh["processes"] if x["role"] != "sysguard"]
    kinds = {command_of(x["argv"])[2] if x["role"] not in ("etcd", "kvstore") else x["argv"][0] for x in others}
    # a real etcd and Mooncake master, as in production
    assert kinds == {"/usr/bin/etcd", ".venvs/engine/bin/mooncake_master", "dynamo.frontend", "dynamo.mocker"}
    assert reh["discovery"] == real["discovery"]

    def user_env(proc):
        return {k: v for k, v in proc["env"].items() if not k.startswith("VLLM_NIXL")}

    assert [user_env(x) for x in reh["processes"]] == [user_env(x) for x in real["processes"]]


@pytest.mark.parametrize("rehearsal", [False, True])
def test_every_port_of_every_slot_stays_below_32768(rehearsal):
    """Dynamo rejects DYN_SYSTEM_PORT >= 32768 (i16), and 32768+ are Linux's ephemeral ports."""
    for f in sorted((ROOT / "recipes").glob("*.yaml")):
        p = plan_of(f.stem, rehearsal=rehearsal)
        top = max(all_ports(p)) + (p["ports"]["slots"] - 1) * p["ports"]["block"]
        assert p["ports"]["slots"] >= 1 and top < 32768, (f.stem, top)


def test_file_discovery_across_nodes_is_refused():
    from servesweep.render.loading import load_recipe
    from servesweep.render.recipe import cluster_problems

    r = load_recipe(ROOT / "recipes" / "dsv4-pro-gb300-1p1d-pdep8-ddep8-mtp.yaml")
    r.doc["control_plane"] = {"discovery": "file"}
    (p,) = cluster_problems(r, CLUSTERS["gb300"])
    assert p.field == "control_plane.discovery" and "inotify" in p.reason and "4 nodes" in p.reason


@pytest.mark.parametrize("rehearsal", [False, True])
def test_no_binding_coincides_for_any_recipe_on_any_cluster(rehearsal):
    """The render-time check, over every shipped recipe and each cluster it names."""
    from servesweep.contract.plan import Plan
    from servesweep.render.loading import load_recipe
    from servesweep.render.ports import binding_collisions

    for f in sorted((ROOT / "recipes").glob("*.yaml")):
        for cluster in load_recipe(f).clusters:
            p = Plan.from_json(plan_of(f.stem, cluster=cluster, rehearsal=rehearsal))
            assert binding_collisions(p.processes, one_host=rehearsal or p.launcher == "local") == [], f.stem


def test_a_container_side_trace_reaches_aiperf_as_its_host_path():
    """Seed 000 on hcm-hgx02: trace_dir is /traces, the container side of /lustre/traces:/traces; aiperf
    runs on the host, so the plan hands it the host side (the model stays container-side: engines read it)."""
    from servesweep.contract.plan import host_side

    plan = plan_of("gemma4-livekit-2tp4-dyn-vllm-prod", cluster="hcm-hgx02")
    assert plan["benchmark"]["dataset"]["path"] == "/lustre/traces/livekit/v1.1-warm.jsonl"
    assert plan["model"]["path"].startswith("/models/")
    mounts = ["/lustre/models:/models:ro", "/lustre/traces:/traces/"]
    assert host_side("/traces/a/b.jsonl", mounts) == "/lustre/traces/a/b.jsonl"
    assert host_side("/traces", mounts) == "/lustre/traces"
    assert host_side("/tracesX/a", mounts) is None and host_side("/opt/x", mounts) is None


def test_the_runtime_reference_grammar_is_defined_once_and_documented():
    """contract.RUNTIME_REF is the grammar every side uses; the contract's docstring names each reference."""
    from servesweep.contract import plan as contract
    from servesweep.render import recipe
    from servesweep.run import spawn
    from servesweep.workflow import engine_args

    assert spawn.REF is contract.RUNTIME_REF and engine_args.RUNTIME_REF is contract.RUNTIME_REF
    assert recipe.RUNTIME_REF is contract.RUNTIME_REF
    for kind in contract.REF_KINDS:
        assert f"{{{kind}:" in contract.__doc__, kind
    for name in contract.REF_NAMES:
        assert f"{{{name}}}" in contract.__doc__, name
    assert "port_base" not in contract.__doc__


def _tree(root: Path, skip: tuple[str, ...] = (".snakemake", ".venvs", ".cache")) -> dict[str, int]:
    return {
        str(p.relative_to(root)): p.stat().st_mtime_ns
        for p in root.rglob("*")
        if p.is_file() and p.relative_to(root).parts[0] not in skip
    }


def test_the_selection_and_the_rules_answers_only_read_and_the_writer_writes(tmp_path):
    """Every answer of the selection and of the rule kit (plans rendered, fingerprints, resources,
    staleness, capacity decisions, the selection doc, each point's inputs) leaves the workflow dir as
    it was, its YAML parse cache under .snakemake/ included; the writer then writes the plans,
    sources, capacity settings and the parse cache."""
    from servesweep.contract.paths import YAML_CACHE
    from servesweep.workflow.rulekit import RuleKit
    from servesweep.workflow.selection import Selection
    from servesweep.workflow.writer import RunFiles

    wf = copy_workflow(tmp_path / "wf")
    before = _tree(wf, skip=(".venvs", ".cache"))
    for cluster in ("local", "hcm-hgx02"):
        sel = Selection(wf, cluster)
        kit = RuleKit(sel, None, {}, cluster, False)
        for p in sel.points:
            sel.index.rendered(p.recipe, p.conc)
            kit.job_resources(p.recipe, p.conc)
            kit.point_inputs()(_Wildcards(recipe=p.recipe, conc=str(p.conc)))
        sel.staleness()
        sel.selection_doc()
        for recipe in sel.searches.recipes:
            sel.capacity(recipe)
    assert _tree(wf, skip=(".venvs", ".cache")) == before
    RunFiles(Selection(wf, "local")).write_plans()
    written = set(_tree(wf)) - set(before)
    assert {".plans/local-agg-2x-mocker/c4.json", ".plans/local-agg-2x-mocker/source.json"} <= written, sorted(written)
    assert any(f.startswith(".plans/capacity/") for f in written), sorted(written)  # the search's settings
    assert (wf / YAML_CACHE).exists()


class _Wildcards(dict):
    """What Snakemake hands an input function: attributes and keys."""

    __getattr__ = dict.__getitem__


def test_a_cluster_jobs_kit_answers_from_the_plans_the_main_process_wrote(tmp_path):
    """A job's nested snakemake renders nothing: its kit reads each answer from the submitted plans,
    and they are the main process's answers."""
    from types import SimpleNamespace

    from servesweep.workflow.entry import load_or_exit
    from servesweep.workflow.rulekit import JobKit, RuleKit, rule_kit

    wf = copy_workflow(tmp_path / "wf")
    sel = load_or_exit(wf, "hcm-hgx02").selection
    workflow = SimpleNamespace(basedir=str(wf))
    main, job = rule_kit(sel, workflow, {}, "hcm-hgx02", False), rule_kit(None, workflow, {}, "hcm-hgx02", False)
    assert type(main) is RuleKit and type(job) is JobKit and load_or_exit(wf, "hcm-hgx02", main_process=False) is None
    for p in sel.points:
        wc = _Wildcards(recipe=p.recipe, conc=str(p.conc))
        assert job.point_inputs()(wc) == {"plan": sel.index.plan_path(p.recipe, p.conc)}
        assert job.smoke_point(p.recipe) == main.smoke_point(p.recipe)
        assert job.job_resources(p.recipe, p.conc) == main.job_resources(p.recipe, p.conc)
    assert job.held == [] and job.selected_results() == [] and main.selected_results()

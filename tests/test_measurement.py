"""The seeds' own measurement: aiperf's AgentX scenario as aiperf defines it, each setting in the process
that reads it, a process environment only the plan decides, one KV-event config per process, and the
request plane's TLS as a recorded choice."""

from __future__ import annotations

import dataclasses
import json
import subprocess
from pathlib import Path

import pytest

from servesweep.contract.plan import Plan
from servesweep.render.cluster import _from_doc
from servesweep.render.loading import load_recipe
from servesweep.render.plan import render
from servesweep.run import bench
from servesweep.run.spawn import INHERITED_ENV, Context
from servesweep.tools import traces

from helpers import CLUSTERS, ROOT, STACK_CREDENTIALS, plan_of

AGENTX = [
    "dsv4-pro-gb200-3p1d-pdep8-ddep16-pergpu",
    "dsv4-pro-gb300-1p1d-pdep8-ddep8-mtp",
    "dsv4-pro-gb300-3p1d-pdep8-ddep16",
]
RECIPES = sorted((ROOT / "recipes").glob("*.yaml"))
ENGINE_PY = ROOT / ".venvs" / "engine" / "bin" / "python"


class _Ctx:
    def resolve(self, template: str, _name: str) -> str:
        return "http://127.0.0.1:1"


def _argv(plan: dict) -> list[str]:
    return bench.aiperf_argv(Plan.from_json(plan), _Ctx(), Path("/tmp/a"), [])


def _flag(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


@pytest.mark.parametrize("name", AGENTX)
def test_agentx_plans_run_aiperfs_locked_scenario_with_the_seeds_settings(name):
    argv = _argv(plan_of(name))
    assert _flag(argv, "--scenario") == "inferencex-agentx-mvp" and "--unsafe-override" not in argv
    assert _flag(argv, "--public-dataset") == "semianalysis_cc_traces_weka_062126"  # a Weka loader aiperf pins
    assert _flag(argv, "--agentic-cache-warmup-duration") == "600"
    assert _flag(argv, "--agentic-warmup-grace-period") == "1800"
    assert _flag(argv, "--benchmark-duration") == "1800"
    no_cap = ("--output-tokens-mean", "--synthesis-max-osl", "--warmup-duration", "--custom-dataset-type")
    assert not [f for f in no_cap if f in argv], argv


def test_an_agentx_rehearsal_replays_a_generated_weka_trace_marked_not_submission_valid():
    plan = plan_of(AGENTX[1], rehearsal=True)
    argv = _argv(plan)
    assert _flag(argv, "--scenario") == "inferencex-agentx-mvp" and "--unsafe-override" in argv
    assert _flag(argv, "--custom-dataset-type") == "weka_trace"
    folder = ROOT / _flag(argv, "--input-file")
    assert folder == ROOT / "recipes" / "traces" / "agentx-rehearsal" and any(folder.glob("*.json"))
    assert float(_flag(argv, "--benchmark-duration")) < 900  # below the lock: aiperf marks it invalid


def test_the_shipped_weka_trace_is_the_generators_and_aiperfs_format():
    folder = ROOT / "recipes" / "traces" / "agentx-rehearsal"
    expected = traces.weka_traces()
    assert sorted(p.name for p in folder.glob("*.json")) == sorted(expected)
    for name, doc in expected.items():
        assert json.loads((folder / name).read_text()) == doc
    # the pinned client's own model of the format, in the engine venv where aiperf lives
    check = (
        "import pathlib, sys\n"
        "from aiperf.dataset.loader.weka_trace_models import WekaTrace\n"
        "files = sorted(pathlib.Path(sys.argv[1]).glob('*.json'))\n"
        "[WekaTrace.model_validate_json(f.read_text()) for f in files]\n"
        "print(len(files))\n"
    )
    r = subprocess.run([str(ENGINE_PY), "-c", check, str(folder)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == str(len(expected)), r.stderr[-2000:]


def test_the_router_expiry_reaches_the_frontend_and_no_worker():
    for name in [*AGENTX, "dsv4-pro-gb300-1p1d-pdep8-ddep8-mtp-synthetic-8k1k"]:
        for p in plan_of(name)["processes"]:
            value = p["env"].get("DYN_ROUTER_ACTIVE_REQUEST_EXPIRY_SECS")
            assert value == ("3600" if p["role"] == "frontend" else None), (name, p["name"])


def _every_plan():
    for f in RECIPES:
        r = load_recipe(f, str(f.relative_to(ROOT)))
        for cluster in r.clusters:
            yield f.stem, render(r, CLUSTERS[cluster], r.concurrency[0])
            if cluster != "local":
                yield f.stem, render(r, CLUSTERS[cluster], r.concurrency[0], CLUSTERS["local"])


def test_every_rendered_process_has_at_most_one_kv_events_config():
    seen = 0
    for name, plan in _every_plan():
        for p in plan["processes"]:
            n = p["argv"].count("--kv-events-config")
            assert n <= 1, (name, p["name"])
            seen += n
    assert seen > 0  # the launcher's own config is rendered where the KV router needs it


def test_request_plane_tls_is_a_cluster_fact_carried_by_the_plan():
    local = CLUSTERS["local"]
    plain = _from_doc(
        {**local.doc, "control_plane": {**local.doc.get("control_plane", {}), "request_plane_tls": False}}, "x"
    )
    r = load_recipe(ROOT / "recipes" / "local-agg-2x-mocker.yaml")
    on, off = render(r, local, 4), render(r, plain, 4)
    assert on["discovery"]["request_plane_tls"] is True and off["discovery"]["request_plane_tls"] is False
    assert all("DYN_TCP_TLS_CERT_PATH" in p["env"] for p in on["processes"] if p["role"] in ("frontend", "agg"))
    assert not any(k.startswith("DYN_TCP_TLS_") for p in off["processes"] for k in p["env"])


def test_a_process_env_is_the_plans_plus_an_allowlist_of_the_drivers(monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf-test")  # a worker's secret by reference
    plan = Plan.from_json(plan_of("dsv4-pro-gb300-1p1d-pdep8-ddep8-mtp"))
    procs = {p.name: p for p in plan.processes}
    ctx = Context(["10.0.0.1"] * plan.nodes, ["n0"] * plan.nodes, 0, "1", Path("/r"), procs,
                  credentials=STACK_CREDENTIALS)  # fmt: skip
    driver = {"PATH": "/usr/bin", "HOME": "/root", "LC_ALL": "C", "CUDA_VISIBLE_DEVICES": "0,1,2,3",
              "DYN_SYSTEM_PORT": "9999", "SLURM_STEP_ID": "3", "MY_TOKEN": "s", "VLLM_X": "1"}  # fmt: skip
    for role in ("frontend", "etcd", "sysguard", "kvstore"):
        p = next(p for p in plan.processes if p.role == role)
        env, _ = ctx.env(p, base=driver)
        assert "CUDA_VISIBLE_DEVICES" not in env and "DYN_SYSTEM_PORT" not in env, role
        assert {"PATH", "HOME", "LC_ALL"} <= set(env) and not {"SLURM_STEP_ID", "MY_TOKEN", "VLLM_X"} & set(env)
        assert env["PYTHONUNBUFFERED"] == "1"  # the launcher's own: logs are current
    worker = procs["decode-0-n0"]
    env, _ = ctx.env(worker, base=driver)
    assert env["CUDA_VISIBLE_DEVICES"] == worker.env["CUDA_VISIBLE_DEVICES"]  # the plan's slice, not the job's
    assert "CUDA_VISIBLE_DEVICES" not in INHERITED_ENV and "DYN_SYSTEM_PORT" not in INHERITED_ENV


def test_result_identity_records_the_locked_scenario_and_tls():
    from servesweep.run.result import measurement_terms

    plan = Plan.from_json(plan_of(AGENTX[1], rehearsal=True))
    export = {"metadata": {"submission_valid": False, "submission_invalid_reasons": ["unsafe_override"]}}
    terms = measurement_terms(plan, export)
    assert terms["aiperf_scenario"] == {
        "name": "inferencex-agentx-mvp", "submission_valid": False, "invalid_reasons": ["unsafe_override"],
    }  # fmt: skip
    assert terms["request_plane_tls"] is True
    vllm = Plan.from_json(plan_of("local-agg-2x-vllm-cpu"))
    assert measurement_terms(vllm, {}) == {"aiperf_scenario": None, "request_plane_tls": None}
    assert dataclasses.is_dataclass(plan)


def _export(series: dict[str, list[tuple[str, float]]]) -> dict:
    return {
        "metrics": {
            m: {"series": [{"endpoint_url": u, "stats": {"total": v}} for u, v in s]} for m, s in series.items()
        }
    }


def test_spec_decode_figures_come_from_the_engines_counters_or_say_why_not():
    from servesweep.run.server_export import spec_decode_figures

    plan = Plan.from_json(plan_of("local-agg-2x-vllm-cpu"))
    urls = {"http://a/metrics": "agg-0", "http://b/metrics": "agg-1", "http://elsewhere/metrics": None}
    doc = _export({
        "vllm:spec_decode_num_drafts": [("http://a/metrics", 30.0), ("http://b/metrics", 10.0)],
        "vllm:spec_decode_num_draft_tokens": [("http://a/metrics", 60.0), ("http://b/metrics", 20.0)],
        "vllm:spec_decode_num_accepted_tokens": [("http://a/metrics", 45.0), ("http://b/metrics", 5.0)],
    })  # fmt: skip
    why = {}
    spec = spec_decode_figures(plan, doc, {k: v for k, v in urls.items() if v}, why)
    assert spec == {"drafts": 40, "draft_tokens": 80, "accepted_tokens": 50, "mean_acceptance_length": 2.25}
    assert why == {}
    why = {}
    assert (
        spec_decode_figures(plan, _export({}), {}, why) is None
        and "no vllm:spec_decode_num_drafts" in why["spec_decode"]
    )
    plain = Plan.from_json(plan_of("local-agg-2x-dynamo-vllm-cpu"))
    why = {}
    assert (
        spec_decode_figures(plain, doc, {}, why) is None
        and why["spec_decode"] == "no speculative decoding in this plan"
    )


def test_the_mtp_recipes_carry_their_rejection_sampling_to_the_engine_whole():
    for name in ("dsv4-pro-gb300-1p1d-pdep8-ddep8-mtp", "dsv4-pro-gb300-1p1d-pdep8-ddep8-mtp-synthetic-8k1k"):
        for p in plan_of(name)["processes"]:
            if p["role"] in ("prefill", "decode"):
                cfg = json.loads(p["argv"][p["argv"].index("--speculative-config") + 1])
                assert cfg["method"] == "mtp" and cfg["rejection_sample_method"] == "synthetic", (name, p["name"])

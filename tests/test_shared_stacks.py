"""A stack's identity is its server side only: points of recipes that differ only in what the
client does (scenario, dataset, concurrency, duration, SLO, validity) share one stack (on Slurm one
held stack's job) and one curve file; anything that changes the servers starts another."""

from __future__ import annotations

import copy
import dataclasses
import json
import os

import pytest
import yaml

from servesweep.contract import heartbeat
from servesweep.contract.paths import curve_file, plan_file
from servesweep.render.loading import load_recipe
from servesweep.render.plan import render
from servesweep.workflow.rulekit import RuleKit
from servesweep.workflow.selection import Selection
from servesweep.workflow.writer import RunFiles

from helpers import CLUSTERS, ROOT, copy_workflow

BASE = load_recipe(ROOT / "recipes" / "local-agg-2x-mocker.yaml")


def _server(mutate, conc: int = 4, rehearsal: bool = False) -> str:
    doc = copy.deepcopy(BASE.doc)
    mutate(doc)
    r = dataclasses.replace(BASE, name=doc["name"], doc=doc)
    return render(r, CLUSTERS["local"], conc, CLUSTERS["local"] if rehearsal else None)["fingerprints"]["server"]


def _set(path: str, value):
    def mutate(doc):
        *parents, last = path.split(".")
        d = doc
        for p in parents:
            d = d.setdefault(p, {})
        d[last] = value

    return mutate


CLIENT_SIDE = [
    _set("name", "another-name"),
    _set("scenario.name", "another-scenario"),
    _set("scenario.duration_s", 7),
    _set("scenario.warmup", {"requests": 9}),
    _set("scenario.dataset", {"synthetic": {"isl": 4000, "osl": 500}}),
    _set("slo", {"ttft_p95_s": 9.0}),
    _set("validity", {"max_error_rate": 0.2}),
    _set("stack", {"reset_prefix_cache": True}),
]
SERVER_SIDE = [
    lambda d: d["engine"]["args"].extend(["--max-num-seqs", "77"]),
    _set("topology.aggregated.replicas", 3),
    _set("frontend.router", {"mode": "round-robin"}),
    _set("env", {"DYN_LOG": "debug"}),
]


@pytest.mark.parametrize("mutate", CLIENT_SIDE)
def test_what_the_client_decides_is_not_the_servers_identity(mutate):
    assert _server(mutate) == _server(lambda d: None)


def test_the_concurrency_is_not_the_servers_identity():
    assert _server(lambda d: None, conc=4) == _server(lambda d: None, conc=16)


@pytest.mark.parametrize("mutate", SERVER_SIDE)
def test_what_changes_the_servers_is_their_identity(mutate):
    assert _server(mutate) != _server(lambda d: None)


def test_a_rehearsal_stack_is_not_the_real_one():
    assert _server(lambda d: None, rehearsal=True) != _server(lambda d: None)


PROD = "gemma4-hgx02-4x-tp2-sglang"


def _two_scenarios(tmp_path):
    """The production recipe and a copy that differs only in its scenario; a third with other servers."""
    wf = copy_workflow(tmp_path / "wf", recipes=[PROD])
    doc = yaml.safe_load((wf / "recipes" / f"{PROD}.yaml").read_text())
    other = dict(copy.deepcopy(doc), name="b-synthetic", concurrency=[8])
    other["scenario"] = {**other["scenario"], "name": "synthetic", "dataset": {"synthetic": {"isl": 8000, "osl": 1000}}}
    (wf / "recipes" / "b-synthetic.yaml").write_text(yaml.safe_dump(other, sort_keys=False))
    third = dict(copy.deepcopy(other), name="c-other-servers")
    third["engine"] = {**third["engine"], "args": [*third["engine"]["args"], "--max-running-requests", 64]}
    (wf / "recipes" / "c-other-servers.yaml").write_text(yaml.safe_dump(third, sort_keys=False))
    return wf


def test_recipes_with_one_server_identity_share_one_held_stack(tmp_path, monkeypatch):
    """On Slurm both recipes' points run on one held stack (no Slurm job of their own), next to each
    other; the stack's curve file counts the points of both recipes and sizes its job for one startup
    and every point."""
    from servesweep.contract.plan import CurveHint, Plan
    from servesweep.run.stacks.held import HoldRequest

    wf = _two_scenarios(tmp_path)
    sel = Selection(wf, "hcm-hgx02")
    files = RunFiles(sel)
    files.write_plans()
    kit = RuleKit(sel, None, {}, "hcm-hgx02", False)
    assert sel.stacks.mates(PROD) == sel.stacks.mates("b-synthetic") == ("b-synthetic", PROD)
    assert sel.stacks.mates("c-other-servers") == ("c-other-servers",)
    assert kit.held == ["b-synthetic", "c-other-servers", PROD]
    plans = {
        (r, c): json.loads((wf / plan_file(r, c)).read_text()) for r, c in [(PROD, 96), (PROD, 150), ("b-synthetic", 8)]
    }
    ranks = sorted(sel.recipes, key=lambda n: sel.stacks.rank(n, False))
    assert ranks == ["b-synthetic", PROD, "c-other-servers"]
    monkeypatch.setenv(heartbeat.ENV, "")  # start_running sets it for the jobs: restored after the test
    files.start_running(list((r, c, False) for r, c in plans))
    try:
        assert files.beat is not None and os.environ[heartbeat.ENV] == str(files.beat.path)
        server = plans[(PROD, 96)]["fingerprints"]["server"]
        curve = json.loads((wf / curve_file(server, False)).read_text())
        assert curve["expected"] == 3 and curve["searching"] == []
        assert curve["points_s"] == sum(p["resources"]["point_s"] for p in plans.values())
        first = plans[("b-synthetic", 8)]
        request = HoldRequest.of(Plan.from_json(first), CurveHint(3, False, 0.0, curve["points_s"]), "gpu", None)
        floor = first["resources"]["startup_s"] + curve["points_s"]
        assert floor / 60 <= request.runtime_min <= (floor + 600) / 60 and request.nodes == 1
    finally:
        files.beat.stop()


def test_a_recipe_that_reuses_no_stack_is_alone(tmp_path):
    wf = _two_scenarios(tmp_path)
    doc = yaml.safe_load((wf / "recipes" / "b-synthetic.yaml").read_text())
    doc["stack"] = {"reuse": False}
    (wf / "recipes" / "b-synthetic.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    sel = Selection(wf, "hcm-hgx02")
    files = RunFiles(sel)
    files.write_plans()
    kit = RuleKit(sel, None, {}, "hcm-hgx02", False)
    assert sel.stacks.mates(PROD) == (PROD,) and sel.stacks.mates("b-synthetic") == ("b-synthetic",)
    # on Slurm its points are Slurm jobs of their own, each with one startup and its own time
    assert "b-synthetic" not in kit.held and PROD in kit.held
    res, plan = kit.job_resources("b-synthetic", 8), json.loads((wf / plan_file("b-synthetic", 8)).read_text())
    assert res["nodes"] == 1 and res["runtime_min"] == plan["resources"]["runtime_min"]


def test_a_points_client_side_is_checked_apart_from_its_stacks(tmp_path):
    """A missing trace fails the point that reads it, never the stack that points of other
    scenarios share; a missing model fails the stack."""
    from servesweep.checks.preflight import check_plan
    from servesweep.contract.plan import Plan

    doc = copy.deepcopy(BASE.doc)
    doc["scenario"]["dataset"]["trace"]["path"] = "recipes/traces/nowhere.jsonl"
    doc["model"]["path"] = ".cache/models/no-model"  # under the data roots, not there
    plan = Plan.from_json(render(dataclasses.replace(BASE, doc=doc), CLUSTERS["local"], 4))
    result = ROOT / "results" / "x" / "c4.json"

    def fields(sides):
        return {p.field for p in check_plan(plan, ROOT, result, in_job=True, sides=sides)[0]}

    assert "scenario.dataset.trace.path" in fields(("client",)) and "model.path" not in fields(("client",))
    assert "model.path" in fields(("server",)) and "scenario.dataset.trace.path" not in fields(("server",))
    assert {"model.path", "scenario.dataset.trace.path"} <= fields(("client", "server"))

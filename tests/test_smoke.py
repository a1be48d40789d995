"""The API smoke: what a stack answers, recorded row by row (run/smoke), compared by `servesweep
diff` (report/smoke_diff); on the local stack it takes a turn on the points' warm stack (no engine
start of its own) and an edit of the request set reruns only the smokes."""

from __future__ import annotations

import copy
import json
import re

import pytest
import yaml

from servesweep.contract.plan import Plan
from servesweep.run import smoke

from helpers import ROOT, copy_workflow, no_processes_left, plan_of, servesweep, snakemake, stack_logs

REQUESTS = ROOT / "scripts/servesweep/checks/smoke-requests.yaml"


def _row(rid: str, **kw) -> dict:
    usage = {"prompt_tokens": 9, "completion_tokens": 4}
    row = {"id": rid, "expect": "2xx", "status": 200, "ok": True, "content": "red, blue", "reasoning": None,
           "tool_calls": [], "finish_reason": "length", "usage": usage}  # fmt: skip
    return row | kw


def _doc(rows: list[dict], engine: str = "dynamo.vllm") -> dict:
    ident = {"recipe": "r", "cluster": "local", "rehearsal": False, "engine": engine, "plan_fingerprint": "p",
             "server_fingerprint": "s", "request_set": "q", "stack": "x", "time": "t"}  # fmt: skip
    return {"schema": smoke.SCHEMA, "identity": ident, "rows": rows}


def test_a_smoke_diff_names_the_rows_and_fields_that_differ(tmp_path):
    a = _doc([_row("chat"), _row("tools-auto"), _row("malformed", expect="4xx", status=400, content=None)])
    b = copy.deepcopy(a)
    b["identity"]["engine"] = "vllm"
    b["rows"][1] |= {"content": None, "tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]}
    b["rows"][2] |= {"status": 500, "ok": False, "error": "Internal Server Error"}
    files = []
    for i, doc in enumerate((a, b, a)):
        files.append(tmp_path / f"s{i}.json")
        files[-1].write_text(json.dumps(doc))
    r = servesweep("diff", str(files[0]), str(files[1]))
    assert r.returncode == 1, r.stderr
    assert "tools-auto: differs in content, tool_calls" in r.stdout
    assert "malformed: differs in status, ok" in r.stdout and "error (" in r.stdout and "Internal Server" in r.stdout
    assert "chat:" not in r.stdout and "1 of 3 rows equal" in r.stdout
    same = servesweep("diff", str(files[0]), str(files[2]))
    assert same.returncode == 0 and "3 of 3 rows equal" in same.stdout
    (tmp_path / "bad.json").write_text(json.dumps(_doc([_row("chat", status="200")])))
    bad = servesweep("diff", str(files[0]), str(tmp_path / "bad.json"))
    assert bad.returncode == 2 and "not a usable smoke file" in bad.stderr and "Traceback" not in bad.stderr


def test_the_reasoning_rows_go_only_to_a_stack_that_parses_reasoning():
    request_set = yaml.safe_load(REQUESTS.read_text())
    plan = Plan.from_json(plan_of("local-agg-2x-mocker"))
    ids = [r["id"] for r in smoke.request_rows(plan, request_set)]
    assert "reasoning-on" not in ids and {"chat", "tools-required", "malformed-bad-role"} <= set(ids)
    doc = plan_of("local-agg-2x-mocker")
    doc["processes"][-1]["argv"] = [*doc["processes"][-1]["argv"], "--reasoning-parser", "qwen3"]
    rows = smoke.request_rows(Plan.from_json(doc), request_set)
    assert {"reasoning-on", "reasoning-off"} <= {r["id"] for r in rows}
    for r in rows:
        assert r["body"]["temperature"] == 0 and r["body"]["seed"] == smoke.SEED and r["body"]["model"]
        assert ("tools" in r["body"]) == r["id"].startswith("tools-")


@pytest.mark.integration
def test_the_checks_take_a_turn_on_the_points_stack_and_rerun_alone(tmp_path):
    """The API smoke and the recipe's eval join the point's warm stack (one engine start for all
    three); an edit of an evals entry or of the request set reruns only that check, and `servesweep
    why` says so."""
    wf = copy_workflow(tmp_path / "wf", ["local-agg-2x-mocker"])
    recipe = wf / "recipes/local-agg-2x-mocker.yaml"
    recipe.write_text(re.sub(r"duration_s: \d+", "duration_s: 3", recipe.read_text()))
    targets = ["results/local-agg-2x-mocker/c4.json", "results/local-agg-2x-mocker/smoke.json"]
    targets.append("results/local-agg-2x-mocker/eval-mmlu.json")
    with no_processes_left(wf):
        r = snakemake(wf, *targets)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    doc = json.loads((wf / targets[1]).read_text())
    assert [row["id"] for row in doc["rows"] if not row["ok"]] == []
    assert {row["id"]: row["status"] for row in doc["rows"]}["malformed-no-messages"] == 400
    keeper = (stack_logs(wf, targets[0]) / "keeper-driver.log").read_text()
    assert len(re.findall(r"\] starting \d+ processes", keeper)) == 1  # one engine start for both
    stack_id = json.loads((wf / targets[0]).read_text())["identity"]["stack"]["id"]
    evaluation = json.loads((wf / targets[2]).read_text())
    assert doc["identity"]["stack"] == evaluation["identity"]["stack"] == stack_id
    assert evaluation["total"] == 12 and evaluation["eval"]["tasks"] == ["abstract_algebra"]  # the generated set
    if evaluation["score"] is None:  # the mocker's random tokens grade as nothing: said, never a 0 %
        assert evaluation["unparsed"] == evaluation["total"] and evaluation["stderr"] is None
    else:
        assert 0 <= evaluation["score"] <= 1 and evaluation["stderr"] is not None
    assert servesweep("why", cwd=wf).stdout.count("eval-mmlu") == 0
    recipe.write_text(recipe.read_text().replace("n_shots: 0", "n_shots: 1"))
    _reruns_only(wf, targets, {targets[2]}, "eval-mmlu: stale — evals.mmlu changed")
    requests = wf / "scripts/servesweep/checks/smoke-requests.yaml"
    requests.write_text(requests.read_text() + "\n# edited\n")
    _reruns_only(wf, targets, {targets[1], targets[2]}, "smoke: stale — the request set changed")


def _reruns_only(wf, targets: list[str], outputs: set[str], because: str) -> None:
    dry = snakemake(wf, "-n", *targets)
    assert dry.returncode == 0, dry.stderr[-2000:]
    assert set(re.findall(r"output: (results/\S+)", dry.stdout)) == outputs  # the points stay
    assert because in servesweep("why", cwd=wf).stdout

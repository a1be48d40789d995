"""The whole accuracy path against a stand-in server whose score is known in advance
(tools/eval_standin): servesweep's own run-eval turn (run/evals through run/check_turn) runs aiperf's
real accuracy mode on the local MMLU questions (the local cluster's hf_home, as `make setup` wrote
it), reads aiperf's export, writes the eval file, and the summary shows it. Only the stack is a
stand-in: the turn is handed the stand-in's URL instead of starting engines."""

from __future__ import annotations

import json
import math
import os
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from servesweep.checks import evalsets
from servesweep.contract import paths
from servesweep.report.accuracy import accuracy_blocks, accuracy_section
from servesweep.run import check_turn, evals
from servesweep.tools import eval_standin, evaldata

from helpers import ROOT, plan_of

HF_HOME = ROOT / ".cache/hf"  # the local cluster's hf_home, where `make setup` wrote the questions
TASKS = ["abstract_algebra"]


class StandinStack:
    """What run-eval's turn needs of a stack (run/driver.open_stack's): the client URL, the watch."""

    def __init__(self, url: str):
        self.info = self
        self.id = "eval-standin"
        self.url = url

    def context(self, plan):
        return self

    def resolve(self, template: str, me: str) -> str:
        return self.url

    def attach(self) -> None:
        pass

    def check(self, when: str) -> None:
        pass

    def detach(self) -> None:
        pass


@pytest.fixture
def keep_umask():
    """run-eval's turn makes its process's outputs owner-only (a driver's entry point): undone after."""
    umask = os.umask(0o022)
    os.umask(umask)
    yield
    os.umask(umask)


def run_eval_against(url: str, tmp_path: Path, monkeypatch) -> tuple[int, dict | None, str]:
    """servesweep's run-eval turn on the mocker recipe's plan, its stack the stand-in at ``url``:
    (exit status, the eval file or None, the turn's driver log)."""
    plan = plan_of("local-agg-2x-mocker")
    plan["benchmark"] |= {"aiperf": str(ROOT / ".venvs/engine/bin/aiperf"), "hf_home": str(HF_HOME)}
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    settings = evalsets.settings_doc("mmlu", {"tasks": TASKS, "n_shots": 0, "concurrency": 4})
    (tmp_path / "settings.json").write_text(json.dumps(settings))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(check_turn, "open_stack", lambda *args: StandinStack(url))
    out = tmp_path / "eval-mmlu.json"
    rc = evals.run_eval(tmp_path / "plan.json", tmp_path / "settings.json", out)
    logs = sorted(tmp_path.glob(f"**/{paths.DRIVER_LOG}"))
    return rc, json.loads(out.read_text()) if out.exists() else None, "".join(p.read_text() for p in logs)


def summary_row(doc: dict) -> list[str]:
    """The eval's row of the summary's accuracy table, cell by cell."""
    lines = "\n".join(accuracy_section([doc], None)).splitlines()
    row = next(ln for ln in lines if ln.startswith(f"| {doc['identity']['recipe']} "))
    return [cell.strip() for cell in row.strip("|").split("|")]


@pytest.fixture
def questions() -> list[dict]:
    rows = evaldata.mmlu_rows(12)
    count = evalsets.problem_count(HF_HOME, "mmlu", TASKS)  # ValueError names the cache when it is missing
    assert count == len(rows), f"{HF_HOME} holds {count} questions, not evaldata's {len(rows)}: run `make setup`"
    return rows


@pytest.mark.integration  # aiperf runs from the engine venv
def test_nine_of_twelve_right_is_75_percent_with_its_stderr(questions, tmp_path, monkeypatch, keep_umask):
    key = eval_standin.answer_key(questions, wrong=3)
    with eval_standin.serving(key) as (server, url):
        rc, doc, log = run_eval_against(url, tmp_path, monkeypatch)
    assert rc == 0 and doc is not None, log[-3000:]
    assert sorted(server.asked) == sorted(r["question"] for r in questions)  # each question once
    assert (doc["correct"], doc["total"], doc["unparsed"]) == (9, 12, 0)
    assert doc["score"] == 0.75
    assert doc["stderr"] == pytest.approx(math.sqrt(0.75 * 0.25 / 11))  # lm-eval's: sample std / sqrt(n)
    assert [(t["task"], t["correct"], t["total"]) for t in doc["tasks"]] == [("abstract_algebra", 9, 12)]
    assert summary_row(doc)[3:7] == ["75.0 %", "13.1 %", "9 / 12", "0"]  # score, stderr, counts, unparsed
    assert accuracy_blocks([doc], {}) == {} and doc["warnings"] == []


@pytest.mark.integration
def test_a_server_that_answers_nothing_gradable_has_no_score(questions, tmp_path, monkeypatch, keep_umask):
    with eval_standin.serving({}) as (server, url):
        rc, doc, log = run_eval_against(url, tmp_path, monkeypatch)
    assert rc == 0 and doc is not None, log[-3000:]
    assert len(server.asked) == 12
    assert (doc["score"], doc["stderr"], doc["correct"], doc["total"], doc["unparsed"]) == (None, None, 0, 12, 12)
    said = [w for w in doc["warnings"] if w.startswith("every accuracy response was unparsed")]
    assert len(said) == 1, doc["warnings"]  # aiperf's own warning, carried into the eval file
    assert summary_row(doc)[3:7] == ["no gradable answers (12 unparsed)", "–", "0 / 12", "12"]
    assert f"aiperf warned: {said[0]}" in "\n".join(accuracy_section([doc], None))
    assert accuracy_blocks([doc], {}) == {doc["identity"]["recipe"]: "mmlu: no gradable answers (12 unparsed)"}


def _post(url: str, body) -> tuple[int, str, str]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    req = urllib.request.Request(f"{url}/v1/chat/completions", data, {"Content-Type": "application/json"})
    try:
        with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(req, timeout=10) as r:  # no proxy
            return r.status, r.headers["Content-Type"], r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, "", ""


def test_the_standin_answers_by_its_key_streamed_or_not():
    rows = evaldata.mmlu_rows(2)
    key = eval_standin.answer_key(rows, wrong=1)
    assert key == {rows[0]["question"]: "B", rows[1]["question"]: "B"}  # gold A shifted to B; gold B kept
    prompt = "The following are ...\n\nQuestion: " + rows[1]["question"] + "\nA. 1\nB. 2\nAnswer:"
    ask = {"model": "m", "messages": [{"role": "user", "content": prompt}]}
    with eval_standin.serving(key) as (server, url):
        status, kind, text = _post(url, ask)
        assert status == 200 and json.loads(text)["choices"][0]["message"]["content"] == " B"
        status, kind, text = _post(url, ask | {"stream": True, "stream_options": {"include_usage": True}})
        events = [json.loads(line[6:]) for line in text.split("\n\n") if line.startswith("data: {")]
        assert kind == "text/event-stream" and text.endswith("data: [DONE]\n\n")
        assert "".join(e["choices"][0]["delta"].get("content", "") for e in events if e["choices"]) == " B"
        assert events[-1]["usage"]["completion_tokens"] == 1
        unknown = {"model": "m", "messages": [{"role": "user", "content": "Question: what else?"}]}
        assert json.loads(_post(url, unknown)[2])["choices"][0]["message"]["content"] == eval_standin.UNGRADABLE
        assert _post(url, b"{not json")[0] == 400
        assert server.asked == [rows[1]["question"]] * 2 + ["what else?"]

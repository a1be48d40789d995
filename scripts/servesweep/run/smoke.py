"""run-smoke: what a stack answers, beside how fast: the project's fixed request set
(``checks/smoke-requests.yaml``) sent to a recipe's stack at temperature 0 with a fixed seed, each
response normalised (status, content, reasoning, tool calls, finish reason, usage) into
``results/<recipe>/smoke.json``. It runs on the recipe's warm stack like a point (one turn on it,
no engine start of its own when the points run in the same snakemake run). ``servesweep diff``
compares two smoke files row by row (report/smoke_diff)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path

from ..contract.plan import Plan
from ..fileio.encode import digest
from ..fileio.yamlio import load_yaml
from . import check_turn

SCHEMA = "servesweep.smoke/1"
SEED = 1234
TIMEOUT_S = 60.0
REASONING_FLAGS = ("--reasoning-parser", "--dyn-reasoning-parser")  # a stack that parses reasoning


def request_rows(plan: Plan, request_set: dict) -> list[dict]:
    """The rows this stack gets: the reasoning rows only where a reasoning parser runs."""
    reasons = any(f in p.argv for p in plan.processes for f in REASONING_FLAGS)
    rows = []
    for row in request_set["rows"]:
        if row.get("reasoning") and not reasons:
            continue
        body = {"model": plan.model["name"], "temperature": 0, "seed": SEED, **row["body"]}
        if row.get("with_tools"):
            body["tools"] = request_set["tools"]
        rows.append({"id": row["id"], "expect": row["expect"], "body": body})
    return rows


def send(client: str, row: dict) -> dict:
    """One request; its response normalised (never raises: a dead connection is status 0)."""
    req = urllib.request.Request(
        f"{client}/v1/chat/completions", json.dumps(row["body"]).encode(), {"content-type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=TIMEOUT_S) as r:
            raw = r.read().decode("utf-8", "replace")
            status = r.status
    except urllib.error.HTTPError as e:
        status, raw = e.code, e.read().decode("utf-8", "replace")
    except (urllib.error.URLError, OSError, TimeoutError) as e:
        status, raw = 0, str(e)
    out = {"id": row["id"], "expect": row["expect"], "status": status}
    if 200 <= status < 300:
        out |= _from_stream(raw) if row["body"].get("stream") else _from_json(raw)
    else:
        out |= {"content": None, "reasoning": None, "tool_calls": [], "finish_reason": None, "usage": None}
        out["error"] = raw.strip()[:300]
    out["ok"] = _status_class(status) == row["expect"]
    return out


def _status_class(status: int) -> str:
    return f"{status // 100}xx" if status else "no answer"


def _from_json(raw: str) -> dict:
    try:
        doc = json.loads(raw)
        choice = doc["choices"][0]
        msg = choice.get("message") or {}
    except (ValueError, KeyError, IndexError, TypeError):
        return {"content": None, "reasoning": None, "tool_calls": [], "finish_reason": None, "usage": None,
                "error": f"not an OpenAI chat response: {raw[:200]}"}  # fmt: skip
    calls = [_call(c) for c in msg.get("tool_calls") or []]
    return _fields(msg.get("content"), msg.get("reasoning_content"), calls, choice.get("finish_reason"), doc)


def _from_stream(raw: str) -> dict:
    """Server-sent events put together: content and reasoning joined, tool-call deltas merged."""
    content, reasoning, calls, finish, usage = [], [], {}, None, None
    for line in raw.splitlines():
        if not line.startswith("data:") or line.strip() == "data: [DONE]":
            continue
        try:
            chunk = json.loads(line[5:])
        except ValueError:
            continue
        usage = chunk.get("usage") or usage
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            content.append(delta.get("content") or "")
            reasoning.append(delta.get("reasoning_content") or "")
            for c in delta.get("tool_calls") or []:
                merged = calls.setdefault(c.get("index", 0), {"name": "", "arguments": ""})
                fn = c.get("function") or {}
                merged["name"] += fn.get("name") or ""
                merged["arguments"] += fn.get("arguments") or ""
            finish = choice.get("finish_reason") or finish
    tool_calls = [_call({"function": calls[i]}) for i in sorted(calls)]
    return _fields("".join(content) or None, "".join(reasoning) or None, tool_calls, finish, {"usage": usage})


def _call(c: dict) -> dict:
    fn = c.get("function") or {}
    args = fn.get("arguments")
    try:
        args = json.loads(args) if isinstance(args, str) else args
    except ValueError:
        pass  # kept as the text it was: a malformed argument string is a finding
    return {"name": fn.get("name"), "arguments": args}


def _fields(content, reasoning, calls, finish, doc) -> dict:
    usage = doc.get("usage") or {}
    kept = {k: usage.get(k) for k in ("prompt_tokens", "completion_tokens")} if usage else None
    return {"content": content, "reasoning": reasoning, "tool_calls": calls, "finish_reason": finish, "usage": kept}


def run_smoke(plan_path: Path, requests_path: Path, out_path: Path, join: Path | None = None) -> int:
    request_set, problems = load_yaml(requests_path)
    if problems:
        print(f"servesweep: {problems[0]}")
        return 2

    def measure(plan: Plan, stack, run_dir: Path, say) -> dict:
        client = stack.info.context(plan).resolve(plan.client_url, "")
        rows = [send(client, row) for row in request_rows(plan, request_set)]
        bad = [r["id"] for r in rows if not r["ok"]]
        say(f"smoke: {len(rows)} requests, {len(rows) - len(bad)} answered as expected" + (
            f"; not as expected: {', '.join(bad)}" if bad else ""))  # fmt: skip
        ident = check_turn.identity(plan, stack) | {"request_set": digest(Path(requests_path).read_text())}
        return {"schema": SCHEMA, "identity": ident, "rows": rows}

    return check_turn.take_turn(plan_path, out_path, "smoke", "smoke.schema.yaml", measure, join)

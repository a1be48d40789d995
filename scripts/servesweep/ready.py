"""Waiting until a stack is really ready, and saying what it waits for.

Ready means: every worker's own /health says ready, the frontend is healthy,
lists the model, shows exactly the registrations the plan expects (counted as
the frontend counts them: /health instances with endpoint "generate", by
component), and a smoke request returns at least one output token.
A process that exits meanwhile fails at once.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field

from .metrics import http_get, http_post_json
from .spawn import Context, Handle


class PointFailed(Exception):
    """A point cannot produce a valid result; the message says why."""


def exited_message(h: Handle, rc: int, when: str) -> str:
    tail = h.log_tail(15)
    return f"process {h.name} exited with code {rc} {when}; log {h.log_path}, last lines:\n{tail}"


def check_alive(handles: list[Handle], when: str) -> None:
    for h in handles:
        rc = h.poll()
        if rc is not None:
            raise PointFailed(exited_message(h, rc, when))


def _health_ok(status: int, body: str) -> bool:
    if status != 200:
        return False
    try:
        doc = json.loads(body)
    except ValueError:
        return True  # plain vllm: 200 with an empty body
    return str(doc.get("status", "")).lower() in ("ready", "healthy", "ok")


def registrations(body: str) -> dict[str, int]:
    try:
        doc = json.loads(body)
    except ValueError:
        return {}
    out: dict[str, int] = {}
    for inst in doc.get("instances", []):
        if inst.get("endpoint") == "generate":
            c = inst.get("component", "?")
            out[c] = out.get(c, 0) + 1
    return out


def model_listed(body: str, model: str) -> bool:
    try:
        return any(m.get("id") == model for m in json.loads(body).get("data", []))
    except (ValueError, AttributeError):
        return False


@dataclass
class Readiness:
    started: float
    healthy_at: dict = field(default_factory=dict)  # process -> monotonic time its /health was seen ready
    registered_at: float | None = None
    smoke_at: float | None = None
    smoke_tokens: int = 0


def wait_ready(plan: dict, ctx: Context, handles: list[Handle], timeout_s: float, say=print) -> Readiness:
    procs = {p["name"]: p for p in plan["processes"]}
    model = plan["model"]["name"]
    fe = plan["frontend"]
    client = ctx.resolve(plan["client_url"], "")
    expect = plan["expect_registrations"]
    checks = {n: ctx.url(p["health_url"], n) for n, p in procs.items() if p["health_url"]}
    r = Readiness(time.monotonic())
    deadline = r.started + timeout_s
    delay, last_msg, seen, listed = 0.02, "", {}, False
    while True:
        check_alive(handles, "during startup")
        now = time.monotonic()
        for name, url in checks.items():
            if name not in r.healthy_at and _health_ok(*http_get(url, timeout=1.0)):
                r.healthy_at[name] = time.monotonic()
        if fe and fe in r.healthy_at:
            status, body = http_get(f"{client}/health", timeout=1.0)
            seen = registrations(body) if status == 200 else {}
            extra = {c: n for c, n in seen.items() if n > expect.get(c, 0)}
            if extra:
                raise PointFailed(
                    f"frontend sees more registrations than the plan has ({seen} vs {expect}): "
                    "another stack shares this discovery state"
                )
        if not fe:
            seen = dict(expect)
        if seen == expect and r.registered_at is None and len(r.healthy_at) == len(checks):
            r.registered_at = time.monotonic()
        if r.registered_at is not None and not listed:
            listed = model_listed(http_get(f"{client}/v1/models", timeout=1.0)[1], model)
        if listed:
            tokens = smoke(client, model, plan["benchmark"]["endpoint"])
            if tokens > 0:
                r.smoke_at, r.smoke_tokens = time.monotonic(), tokens
                say(
                    f"ready: {len(checks)} processes healthy, registrations {seen}, smoke request "
                    f"returned {tokens} tokens ({r.smoke_at - r.started:.1f} s)"
                )
                return r
        waiting = [n for n in checks if n not in r.healthy_at]
        msg = "waiting for: "
        msg += ", ".join(f"{n} /health" for n in waiting) if waiting else "all /health ready"
        if fe:
            msg += f"; frontend registrations {seen or {}} of {expect}"
            msg += "; model listed" if listed else "; model not listed yet"
        if msg != last_msg:
            say(f"ready: {msg}")
            last_msg = msg
        if now > deadline:
            raise PointFailed(f"stack not ready after {timeout_s:.0f} s; still {msg}")
        time.sleep(delay)
        delay = min(delay * 1.5, 0.1)  # detection lag stays under 0.1 s + one probe


def smoke(client: str, model: str, endpoint: str) -> int:
    if endpoint == "completions":
        url, body = f"{client}/v1/completions", {"model": model, "prompt": "Hello", "max_tokens": 4}
    else:
        url = f"{client}/v1/chat/completions"
        body = {"model": model, "messages": [{"role": "user", "content": "Hello"}], "max_tokens": 4}
    status, resp = http_post_json(url, body, timeout=5.0)
    if status != 200 or not isinstance(resp, dict):
        return 0
    return int((resp.get("usage") or {}).get("completion_tokens") or 0)

"""Waiting until a stack is really ready, and saying what it waits for.

Ready means: every worker's own /health says ready, the frontend is healthy,
lists the model, shows exactly the registrations the plan expects (counted as
the frontend counts them: /health instances with endpoint "generate", by
component), and a smoke request returns at least one output token.
A process that exits meanwhile fails at once.
"""

from __future__ import annotations

import json
import os
import socket
import time
from dataclasses import dataclass, field

from ..contract.plan import Plan
from .credentials import client_context
from .metrics import http_get, http_post_json
from .spawn import Context, Handle


class PointFailed(Exception):
    """A point cannot produce a valid result; the message says why."""


# a stack process stopped, or silent on its health endpoint, this long fails the point (run/watch) and the
# stack (RegistrationWatch): seconds, not the benchmark's duration + grace
STALL_FAIL_S = float(os.environ.get("SERVESWEEP_STALL_FAIL_S", "10"))


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
    if str(doc.get("health", "")).lower() == "true":  # etcd
        return True
    return str(doc.get("status", "")).lower() in ("ready", "healthy", "ok")


def healthy(url: str, tls) -> bool:
    """A process's /health (etcd's over the stack's TLS), or NATS's INFO greeting on its client port."""
    if not url.startswith("nats://"):
        return _health_ok(*http_get(url, timeout=1.0, tls=tls))
    host, _, port = url.removeprefix("nats://").rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=1.0) as s:
            return s.recv(8).startswith(b"INFO ")
    except OSError:
        return False


def tls_for(ctx: Context, urls: dict[str, str]):
    return client_context(ctx.run_dir) if any(u.startswith("https:") for u in urls.values()) else None


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


def wait_healthy(names: list[str], ctx: Context, handles: list[Handle], deadline: float, say=print) -> dict:
    """Wait until each named process's /health is ready; {name: monotonic time}."""
    urls = {n: ctx.url(ctx.processes[n].health_url, n) for n in names if ctx.processes[n].health_url}
    tls = tls_for(ctx, urls)
    seen: dict[str, float] = {}
    while True:
        check_alive(handles, "during startup")
        for name, url in urls.items():
            if name not in seen and healthy(url, tls):
                seen[name] = time.monotonic()
        if len(seen) == len(urls):
            return seen
        if time.monotonic() > deadline:
            waiting = ", ".join(n for n in urls if n not in seen)
            raise PointFailed(f"not healthy in time: {waiting}")
        time.sleep(0.05)


def _frontend_registrations(plan: Plan, ctx: Context) -> dict[str, dict[str, int]]:
    """Each frontend's registrations as it counts them; more than the plan has is an error."""
    seen = {}
    for fe in plan.frontends:
        status, body = http_get(ctx.url("http://{addr:self}:{port:self.http}/health", fe), timeout=1.0)
        seen[fe] = registrations(body) if status == 200 else {}
        extra = {c: n for c, n in seen[fe].items() if n > plan.expect_registrations.get(c, 0)}
        if extra:
            raise PointFailed(
                f"{fe} sees more registrations than the plan has ({seen[fe]} vs {plan.expect_registrations}): "
                "another stack shares this discovery state"
            )
    return seen


def _seen_by(plan: Plan, ctx: Context, fe: str) -> dict | None:
    """A frontend's registrations now, counted as it counts them; None when it did not answer."""
    status, body = http_get(ctx.url("http://{addr:self}:{port:self.http}/health", fe), timeout=2.0)
    return registrations(body) if status == 200 else None


class RegistrationWatch:
    """A ready stack keeps exactly the plan's registrations. A worker whose discovery keep-alive
    lapsed (a stuck process, a host that stood still) is alive yet no longer routed to, and Dynamo
    does not register it again: the stack is broken. Two differing looks a second apart, so a
    frontend busy for one look is not a drift. A frontend that does not answer is no evidence of
    anything: its earlier look stands, and one silent for ``STALL_FAIL_S`` fails the stack."""

    EVERY_S = 1.0

    def __init__(self, plan: Plan):
        self.plan, self.next_at, self.differs, self.silent = plan, 0.0, {}, {}

    def look(self, ctx: Context, when: str) -> None:
        if not self.plan.frontends or time.monotonic() < self.next_at:
            return
        self.next_at = time.monotonic() + self.EVERY_S
        for fe in self.plan.frontends:
            seen = _seen_by(self.plan, ctx, fe)
            if seen is None:
                self._silent(fe, when)
                continue
            self.silent.pop(fe, None)
            if seen == self.plan.expect_registrations:
                self.differs.pop(fe, None)
                continue
            if fe in self.differs:
                raise PointFailed(
                    f"{fe} sees registrations {seen} {when}, the plan has {self.plan.expect_registrations}: "
                    "a worker's registration lapsed (its discovery keep-alive stopped) or a foreign worker joined"
                )
            self.differs[fe] = seen

    def _silent(self, fe: str, when: str) -> None:
        since = self.silent.setdefault(fe, time.monotonic())
        if time.monotonic() - since >= STALL_FAIL_S:
            raise PointFailed(
                f"{fe} has not answered /health for {time.monotonic() - since:.0f} s {when}: a stopped or "
                "hung frontend, its registrations unknown"
            )


def registration_drift(plan: Plan, ctx: Context) -> list[str]:
    """After a benchmark: every frontend must still see exactly the plan's registrations; a foreign
    worker that joined (or one of ours that left) invalidates the point, and so does a frontend that
    does not answer (its registrations are unknown, never taken as unchanged)."""
    out = []
    for fe in plan.frontends:
        seen = _seen_by(plan, ctx, fe)
        if seen is None:
            out.append(f"{fe} did not answer /health within 2 s at the end of the run: a stopped or hung frontend")
        elif seen != plan.expect_registrations:
            out.append(
                f"{fe} saw registrations {seen} at the end of the run, the plan has {plan.expect_registrations}: "
                "a foreign or missing worker during the benchmark"
            )
    return out


def wait_ready(plan: Plan, ctx: Context, handles: list[Handle], timeout_s: float, say=print) -> Readiness:
    model = plan.model["name"]
    client = ctx.resolve(plan.client_url, "")
    expect = plan.expect_registrations
    checks = {p.name: ctx.url(p.health_url, p.name) for p in plan.processes if p.health_url}
    tls = tls_for(ctx, checks)
    r = Readiness(time.monotonic())
    deadline = r.started + timeout_s
    delay, last_msg, seen, listed = 0.02, "", {}, False
    while True:
        check_alive(handles, "during startup")
        now = time.monotonic()
        for name, url in checks.items():
            if name not in r.healthy_at and healthy(url, tls):
                r.healthy_at[name] = time.monotonic()
        if all(fe in r.healthy_at for fe in plan.frontends):
            seen = _frontend_registrations(plan, ctx)
        all_registered = all(s == expect for s in seen.values()) if plan.frontends else True
        if all_registered and r.registered_at is None and len(r.healthy_at) == len(checks):
            r.registered_at = time.monotonic()
        if r.registered_at is not None and not listed:
            listed = model_listed(http_get(f"{client}/v1/models", timeout=1.0)[1], model)
        if listed:
            tokens = smoke(client, model, plan.benchmark.endpoint)
            if tokens > 0:
                r.smoke_at, r.smoke_tokens = time.monotonic(), tokens
                say(
                    f"ready: {len(checks)} processes healthy, registrations {seen or expect} "
                    f"(expected {expect} on each frontend), smoke request returned {tokens} tokens "
                    f"({r.smoke_at - r.started:.1f} s)"
                )
                return r
        waiting = [n for n in checks if n not in r.healthy_at]
        msg = "waiting for: "
        msg += ", ".join(f"{n} /health" for n in waiting) if waiting else "all /health ready"
        if plan.frontends:
            shown = seen.get(plan.frontends[0], {}) if len(seen) <= 1 else seen
            msg += f"; frontend registrations {shown} of {expect}"
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

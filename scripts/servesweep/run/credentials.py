"""Per-stack credentials for the control plane: made by the driver when a stack starts, never
written to a plan, argv, log or result; only files in the run dir, mode 0600.

etcd: the driver enables authentication through etcd's v3 JSON gateway right after etcd is
healthy (root role and user, then ``auth enable``); every Dynamo process connects as that user
(``ETCD_AUTH_USERNAME``/``ETCD_AUTH_PASSWORD``, which Dynamo 1.6 reads). NATS starts with a
config file holding its user, so the password never reaches its argv.
"""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path

from ..contract import Plan
from .metrics import http_post_json

KINDS = ("etcd_password", "nats_password")
NATS_CONFIG = "nats-auth.conf"


class ControlPlaneAuthError(Exception):
    """The control plane could not be locked down: the stack does not start."""


def make(run_dir: Path) -> dict[str, str]:
    creds = {k: secrets.token_urlsafe(24) for k in KINDS}
    path = run_dir / "credentials.json"
    fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        json.dump(creds, fh)
    return creds


def write_nats_config(run_dir: Path, user: str, password: str) -> None:
    fd = os.open(run_dir / NATS_CONFIG, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(f"authorization {{\n  user: {json.dumps(user)}\n  password: {json.dumps(password)}\n}}\n")


def enable_etcd_auth(client_url: str, user: str, password: str) -> None:
    """Root role + user, then auth on: from here every etcd request needs the stack's credential."""
    steps = [
        ("role/add", {"name": "root"}),
        ("user/add", {"name": user, "password": password}),
        ("user/grant", {"user": user, "role": "root"}),
        ("enable", {}),
    ]
    for path, body in steps:
        status, resp = http_post_json(f"{client_url}/v3/auth/{path}", body, timeout=10.0)
        if status != 200 or (isinstance(resp, dict) and resp.get("error")):
            raise ControlPlaneAuthError(f"etcd at {client_url}: /v3/auth/{path} answered {status}: {str(resp)[:200]}")


def etcd_user(plan: Plan) -> str | None:
    """The etcd user the plan's processes connect as (None: no etcd in this stack)."""
    for p in plan.processes:
        if "ETCD_AUTH_USERNAME" in p.env:
            return p.env["ETCD_AUTH_USERNAME"]
    return None


def nats_user(plan: Plan) -> str | None:
    for p in plan.processes:
        if "NATS_AUTH_USERNAME" in p.env:
            return p.env["NATS_AUTH_USERNAME"]
    return None

"""Per-stack credentials for the control plane: made by the driver when a stack starts, never
written to a plan, argv, log or result; only files in the run dir, mode 0600.

etcd: the driver enables authentication through etcd's v3 JSON gateway right after etcd is
healthy (root role and user, then ``auth enable``); every Dynamo process connects as that user
(``ETCD_AUTH_USERNAME``/``ETCD_AUTH_PASSWORD``, which Dynamo 1.6 reads). NATS starts with a
config file holding its user, so the password never reaches its argv. Dynamo's TCP request plane
runs mutual TLS with a CA made for the stack alone (``make_tls``): a process without the stack's
certificate cannot send a worker a request.
"""

from __future__ import annotations

import ipaddress
import json
import os
import secrets
import subprocess
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


TLS_DIR = "tls"
_EC = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes")


def _openssl(*args: str) -> None:
    try:
        subprocess.run(["openssl", *args], check=True, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as e:
        detail = getattr(e, "stderr", "") or str(e)
        raise ControlPlaneAuthError(f"openssl {args[0]} failed: {detail.strip()[-300:]}") from None


def make_tls(run_dir: Path, addrs: list[str]) -> None:
    """A CA of the stack's own and one certificate every process presents (each dials and serves the
    request plane), valid for every node address; the CA key is deleted once it has signed, so no
    other certificate can ever be made for this stack."""
    d = run_dir / TLS_DIR
    d.mkdir(mode=0o700)
    sans = []
    for a in dict.fromkeys([*addrs, "127.0.0.1"]):
        try:
            sans.append(f"IP:{ipaddress.ip_address(a)}")
        except ValueError:
            sans.append(f"DNS:{a}")
    (d / "ext.cnf").write_text(
        f"subjectAltName={','.join(sans)}\nextendedKeyUsage=serverAuth,clientAuth\nbasicConstraints=CA:FALSE\n"
    )
    ca, key = str(d / "ca.pem"), str(d / "ca.key")
    _openssl("req", "-x509", *_EC, "-keyout", key, "-out", ca, "-days", "30", "-subj", "/CN=servesweep stack CA")
    _openssl("req", *_EC, "-keyout", str(d / "node.key"), "-out", str(d / "node.csr"), "-subj", "/CN=servesweep stack")
    serial = str(secrets.randbits(63))
    _openssl(
        "x509", "-req", "-in", str(d / "node.csr"), "-CA", ca, "-CAkey", key, "-set_serial", serial,
        "-out", str(d / "node.pem"), "-days", "30", "-extfile", str(d / "ext.cnf"),
    )  # fmt: skip
    for leftover in ("ca.key", "node.csr", "ext.cnf"):
        (d / leftover).unlink()
    os.chmod(d / "node.key", 0o600)


def uses_tls(plan: Plan) -> bool:
    return any("DYN_TCP_TLS_CERT_PATH" in p.env for p in plan.processes)

"""Per-stack credentials for the control plane: made by the driver when a stack starts, never
written to a plan, argv, log or result; only files in the run dir, mode 0600.

The stack's own CA (``make_tls``) signs one certificate; its key is deleted once it has signed.
etcd takes clients over mutual TLS only (``--client-cert-auth``): without the stack's certificate
no call of any etcd API gets an answer, lease, maintenance and member APIs included. Dynamo's TCP
request plane runs mutual TLS with the same CA (unless the cluster turns it off): a process
without the certificate cannot send a worker a request. NATS starts with a config file holding
its user, so the password never reaches its argv.
"""

from __future__ import annotations

import functools
import ipaddress
import json
import os
import secrets
import ssl
import subprocess
from pathlib import Path

from ..contract import paths
from ..contract.paths import TLS_CA, TLS_CA_KEY, TLS_CERT, TLS_DIR, TLS_EXTENSIONS, TLS_KEY, TLS_REQUEST
from ..contract.plan import TLS_PEM_REFS, Plan

KINDS = ("nats_password",)
NATS_CONFIG = "nats-auth.conf"


class ControlPlaneAuthError(Exception):
    """The control plane could not be locked down: the stack does not start."""


def make(run_dir: Path) -> dict[str, str]:
    creds = {k: secrets.token_urlsafe(24) for k in KINDS}
    path = run_dir / paths.CREDENTIALS_FILE
    fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        json.dump(creds, fh)
    return creds


def write_nats_config(run_dir: Path, user: str, password: str) -> None:
    fd = os.open(run_dir / NATS_CONFIG, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(f"authorization {{\n  user: {json.dumps(user)}\n  password: {json.dumps(password)}\n}}\n")


def nats_user(plan: Plan) -> str | None:
    for p in plan.processes:
        if "NATS_AUTH_USERNAME" in p.env:
            return p.env["NATS_AUTH_USERNAME"]
    return None


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
    ext, csr = d / TLS_EXTENSIONS, str(d / TLS_REQUEST)
    ext.write_text(
        f"subjectAltName={','.join(sans)}\nextendedKeyUsage=serverAuth,clientAuth\nbasicConstraints=CA:FALSE\n"
    )
    ca, key = str(d / TLS_CA), str(d / TLS_CA_KEY)
    _openssl("req", "-x509", *_EC, "-keyout", key, "-out", ca, "-days", "30", "-subj", "/CN=servesweep stack CA")
    _openssl("req", *_EC, "-keyout", str(d / TLS_KEY), "-out", csr, "-subj", "/CN=servesweep stack")
    serial = str(secrets.randbits(63))
    _openssl(
        "x509", "-req", "-in", csr, "-CA", ca, "-CAkey", key, "-set_serial", serial,
        "-out", str(d / TLS_CERT), "-days", "30", "-extfile", str(ext),
    )  # fmt: skip
    for leftover in (key, csr, ext):
        Path(leftover).unlink()
    os.chmod(d / TLS_KEY, 0o600)


TLS_ENV = ("DYN_TCP_TLS_CERT_PATH", "ETCD_AUTH_CLIENT_CERT")  # a process that presents the stack's certificate


def tls_pems(run_dir: Path) -> dict[str, str]:
    """The stack's CA, certificate and key as text, for processes that take PEM, not a path (etcd's
    Dynamo client); they stay in memory and the processes' environments."""
    d = Path(run_dir) / TLS_DIR
    return {ref: (d / name).read_text() for ref, name in TLS_PEM_REFS.items()}


def uses_tls(plan: Plan) -> bool:
    return any(k in p.env for p in plan.processes for k in TLS_ENV)


@functools.lru_cache(maxsize=8)  # one per stack: its files never change once made, and readiness asks often
def client_context(run_dir: Path) -> ssl.SSLContext:
    """Our own calls to the stack's TLS endpoints (etcd's /health): the stack's CA and certificate."""
    d = Path(run_dir) / TLS_DIR
    ctx = ssl.create_default_context(cafile=str(d / TLS_CA))
    ctx.load_cert_chain(str(d / TLS_CERT), str(d / TLS_KEY))
    return ctx
